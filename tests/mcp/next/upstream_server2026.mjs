// An upstream MCP server of revision 2026-07-28 over stdio for the code-mode
// tests, built with the v2 server SDK (@modelcontextprotocol/server 2.4.0,
// pinned in package.json), which serves both eras: codecage
// (`--upstream v2=...`) starts it and offers its tools to Python code as
// tools.add(...), tools.echo(...), tools.era(). `era` says which revision
// the call came in: the request's _meta version (2026-07-28), or
// "initialize" for a call of a session that began with initialize.
import { McpServer, fromJsonSchema } from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";

const numbers = fromJsonSchema({ type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] });
const sum = fromJsonSchema({ type: "object", properties: { sum: { type: "number" } }, required: ["sum"] });
const text = fromJsonSchema({ type: "object", properties: { text: { type: "string" } }, required: ["text"] });
const none = fromJsonSchema({ type: "object", properties: {} });

// One instance per connection, of the era its opening message chose.
serveStdio(() => {
  const server = new McpServer({ name: "demo-upstream-2026", version: "1.0.0" });
  server.registerTool("add", { description: "Adds two numbers.", inputSchema: numbers, outputSchema: sum },
    async ({ a, b }) => ({ content: [{ type: "text", text: String(a + b) }], structuredContent: { sum: a + b } }));
  server.registerTool("echo", { description: "Returns its text.", inputSchema: text },
    async (args) => ({ content: [{ type: "text", text: args.text }] }));
  server.registerTool("era", { description: "The protocol revision of this call.", inputSchema: none },
    async (_args, ctx) => ({ content: [{ type: "text", text: ctx.mcpReq?.envelope?.["io.modelcontextprotocol/protocolVersion"] ?? "initialize" }] }));
  return server;
});
