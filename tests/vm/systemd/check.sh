#!/bin/bash
# The systemd stage of the test VM, second half (installed by prepare.sh as
# /usr/local/libexec/codecage-vm-check, run by codecage-vm-check.service with
# systemd as PID 1, after codecage.service started). Drives the server as a
# deployment would — the CLI client and curl over its Unix socket — and
# checks what dist/codecage.service promises: it becomes active through
# READY=1, serves sandboxes, exec, Python sessions and one-shot runs with
# its hardening in force, reloads on `systemctl reload`, pings the
# watchdog, keeps its sandboxes in cgroups below its own delegated group,
# and drains on `systemctl stop`. Then the controls: the same unit with
# RestrictNamespaces=yes, or RestrictSUIDSGID=yes, added must fail to create
# a sandbox. One line per
# check ("ok NAME" or "FAIL NAME: why"), then "N passed, M failed" and the
# stage's closing line, which tests/vm/run.sh counts.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root
UNIT=codecage
SOCK=/var/lib/codecage/codecage.sock
CONFIG=/etc/codecage/config.json
DROPIN=/run/systemd/system/codecage.service.d
t_begin=$(cat /run/codecage-vm/systemd-t0 2>/dev/null || date +%s)
passed=0
failed=0

echo "codecage-vm: systemd stage: $(systemctl --version | head -1) is PID 1 ($(cat /proc/1/comm));" \
        "codecage.service $(systemctl is-active $UNIT) $(($(date +%s) - t_begin)) s after the hand-over"

# check NAME FUNCTION [ARGS...]: FUNCTION prints why it failed; the line
# ends with the check's seconds.
check() {
        local name=$1 out t0=$SECONDS
        shift
        if out=$("$@" 2>&1); then
                echo "ok $name${out:+ ($out)} [$((SECONDS - t0)) s]"
                passed=$((passed + 1))
        else
                echo "FAIL $name: ${out:-(no detail)} [$((SECONDS - t0)) s]"
                failed=$((failed + 1))
        fi
}

prop() { systemctl show -p "$1" --value $UNIT; }

# api METHOD PATH [JSON]: the answer's body, then its HTTP status on the last line.
api() {
        curl -sS --max-time 300 --unix-socket $SOCK -X "$1" -H 'Content-Type: application/json' \
                ${3:+--data-binary "$3"} -w '\n%{http_code}' "http://codecage$2"
}

# json EXPR: EXPR over the JSON document on stdin, bound to d.
json() { python3 -c "import json, sys; d = json.load(sys.stdin); print($1)"; }

# until_true SECONDS COMMAND...: polls COMMAND every half second.
until_true() {
        local end=$((SECONDS + $1))
        shift
        until "$@"; do
                ((SECONDS < end)) || return 1
                sleep 0.5
        done
}

# The pid of the newest process running exactly CMDLINE (argv joined by
# spaces); fails when there is none.
pid_of() { pgrep -n -f -x -- "$1"; }

check_active() {
        local state type status
        state=$(systemctl is-active $UNIT)
        type=$(prop Type)
        status=$(prop StatusText)
        [ "$state" = active ] || {
                echo "codecage.service is $state"
                journalctl -b -u $UNIT --no-pager -n 30
                return 1
        }
        [ "$type" = notify ] || { echo "Type=$type"; return 1; }
        [ "$status" = serving ] || { echo "STATUS=$status"; return 1; }
        cmp -s /etc/systemd/system/codecage.service /usr/local/share/codecage-vm/codecage.service.dist ||
                { echo "the installed unit is not dist/codecage.service"; return 1; }
        [ "$(prop FragmentPath)" = /etc/systemd/system/codecage.service ] ||
                { echo "loaded from $(prop FragmentPath)"; return 1; }
        echo "Type=notify, STATUS=$status, dist/codecage.service unchanged"
}

check_create() {
        local out
        out=$(codecage sandbox create box --memory 256) || { echo "$out"; return 1; }
        [ "$out" = box ] || { echo "printed '$out'"; return 1; }
}

check_exec() {
        local out
        # shellcheck disable=SC2016
        out=$(codecage sandbox exec box -- sh -c 'echo $((6 * 7)) $(id -u)') ||
                { echo "exit $?: $out"; return 1; }
        [ "${out%% *}" = 42 ] || { echo "printed '$out'"; return 1; }
        echo "$out"
}

check_python_session() {
        local a b
        a=$(api POST /v1/sandboxes/box/python '{"code": "x = 6", "timeout_s": 120}')
        [ "${a##*$'\n'}" = 200 ] || { echo "first call: $a"; return 1; }
        b=$(api POST /v1/sandboxes/box/python '{"code": "x * 7", "timeout_s": 120}')
        [ "${b##*$'\n'}" = 200 ] || { echo "second call: $b"; return 1; }
        local value
        value=$(printf '%s' "${b%$'\n'*}" | json 'd["status"], d["return_value"]')
        [ "$value" = "ok 42" ] || { echo "second call: $b"; return 1; }
        echo "x = 6, then x * 7 = 42"
}

check_one_shot_run() {
        local a value
        # shellcheck disable=SC2016
        a=$(api POST /v1/run '{"command": "echo run-$((40 + 2))", "timeout_s": 120}')
        [ "${a##*$'\n'}" = 200 ] || { echo "$a"; return 1; }
        value=$(printf '%s' "${a%$'\n'*}" | json 'd["status"], repr(d["stdout"])')
        [ "$value" = "ok 'run-42\\n'" ] || { echo "$a"; return 1; }
}

# A sandbox process's cgroup is below codecage.service's own, not the
# server's, and carries the sandbox's memory limit (256 MiB), which only a
# delegated subtree lets the server set.
check_delegation() {
        local service_cg pid cg main_cg dir found=
        service_cg=$(prop ControlGroup)
        codecage sandbox exec box -- sleep 97 >/dev/null 2>&1 &
        local client=$!
        if ! until_true 60 pid_of "sleep 97" >/dev/null; then
                kill $client 2>/dev/null
                echo "no 'sleep 97' process appeared"
                return 1
        fi
        pid=$(pid_of "sleep 97")
        cg=$(sed -n 's/^0:://p' /proc/"$pid"/cgroup)
        main_cg=$(sed -n 's/^0:://p' /proc/"$(prop MainPID)"/cgroup)
        kill "$pid"
        wait $client
        [ -n "$service_cg" ] && [[ $cg == "$service_cg"/* ]] || {
                echo "sandbox process in $cg, the service's group is $service_cg" \
                        "(its trusted.delegate xattr: $(python3 -c 'import os, sys
try: print(os.getxattr(sys.argv[1], "trusted.delegate"))
except OSError as e: print(e.strerror)' "/sys/fs/cgroup$service_cg"))"
                return 1
        }
        [[ $main_cg == "$service_cg" || $main_cg == "$service_cg"/* ]] ||
                { echo "the server runs in $main_cg"; return 1; }
        [ "$cg" != "$main_cg" ] || { echo "sandbox and server share $cg"; return 1; }
        dir=/sys/fs/cgroup$cg
        while [ "$dir" != "/sys/fs/cgroup$service_cg" ]; do
                [ "$(cat "$dir/memory.max" 2>/dev/null)" = 268435456 ] && found=$dir
                dir=${dir%/*}
        done
        [ -n "$found" ] || { echo "no memory.max of 256 MiB between $cg and $service_cg"; return 1; }
        echo "sandbox in ${cg#"$service_cg"/}, server in ${main_cg#"$service_cg"}, memory.max in ${found#/sys/fs/cgroup"$service_cg"/}"
}

check_reload() {
        local pid before out
        pid=$(prop MainPID)
        before=$(date '+%Y-%m-%d %H:%M:%S')
        timeout 120 systemctl reload $UNIT || { echo "systemctl reload: exit $?"; return 1; }
        [ "$(systemctl is-active $UNIT)" = active ] || { echo "$(systemctl is-active $UNIT) after reload"; return 1; }
        [ "$(prop MainPID)" = "$pid" ] || { echo "MainPID $pid became $(prop MainPID)"; return 1; }
        [ "$(prop StatusText)" = "serving (reloaded)" ] || { echo "STATUS=$(prop StatusText)"; return 1; }
        journalctl -u $UNIT --since "$before" --no-pager -o cat | grep -qx "codecage: reloaded $CONFIG" ||
                { echo "no 'reloaded' line in the journal"; return 1; }
        out=$(codecage sandbox exec box -- echo after-reload) || { echo "exec after reload: $out"; return 1; }
        [ "$out" = after-reload ] || { echo "exec after reload printed '$out'"; return 1; }
        echo "same MainPID, STATUS=serving (reloaded), sandbox answers"
}

# The server pings (WATCHDOG=1, every half of WatchdogSec=30) while its store
# answers: the timestamp of the last ping moves, and nothing restarted it.
check_watchdog() {
        local first=$1 now
        [ "$(prop WatchdogUSec)" = 30s ] || { echo "WatchdogUSec=$(prop WatchdogUSec)"; return 1; }
        watchdog_moved() { [ "$(prop WatchdogTimestampMonotonic)" != "$first" ]; }
        until_true 40 watchdog_moved || { echo "no ping since $first"; return 1; }
        now=$(prop WatchdogTimestampMonotonic)
        [ "$(prop NRestarts)" = 0 ] || { echo "NRestarts=$(prop NRestarts)"; return 1; }
        echo "last ping moved from $first to $now"
}

# SIGTERM drains: a call under way finishes, then the server stops its
# sandboxes itself and exits 0, so systemd has nothing of theirs left to
# kill (KillMode=mixed SIGKILLs what remains once the server is gone: at
# most the server's reaper, which a clean exit dismisses anyway).
check_stop_drains() {
        local out client before rc
        out=$(mktemp)
        codecage sandbox exec box -- sh -c 'sleep 3.5; echo drained' >"$out" 2>&1 &
        client=$!
        until_true 60 pid_of "sleep 3.5" >/dev/null || { echo "the call did not start: $(cat "$out")"; return 1; }
        before=$(date '+%Y-%m-%d %H:%M:%S')
        timeout 120 systemctl stop $UNIT || { echo "systemctl stop: exit $?"; return 1; }
        wait $client
        rc=$?
        [ $rc = 0 ] && [ "$(cat "$out")" = drained ] ||
                { echo "the call under way ended with $rc: $(cat "$out")"; return 1; }
        [ "$(prop ActiveState)" = inactive ] || { echo "ActiveState=$(prop ActiveState)"; return 1; }
        [ "$(prop Result)" = success ] || { echo "Result=$(prop Result)"; return 1; }
        [ "$(prop ExecMainCode)" = 1 ] && [ "$(prop ExecMainStatus)" = 0 ] ||
                { echo "the server ended with code $(prop ExecMainCode) status $(prop ExecMainStatus)"; return 1; }
        local killed
        killed=$(journalctl -u $UNIT --since "$before" --no-pager -o cat |
                grep -E 'Killing process|remains running')
        if [ -n "$killed" ] && grep -v '(codecage-reap)' <<<"$killed"; then
                echo "systemd had to kill what the server left"
                return 1
        fi
        [ -z "$killed" ] || echo -n "systemd killed only the reaper; "
        ! pgrep -f -x 'sleep 3.5' >/dev/null || { echo "a sandbox process survived"; return 1; }
        echo "the call under way printed 'drained', the server exited 0"
}

# The controls: an option the unit leaves out on purpose, added by a
# drop-in, must make sandbox creation fail (the server may refuse to start
# at all), and creation works again once the drop-in is gone.
check_option_breaks() {
        local option=$1 out refused
        mkdir -p $DROPIN && printf '[Service]\n%s\n' "$option" >$DROPIN/zz-codecage-vm.conf
        systemctl daemon-reload
        echo data >/tmp/codecage-vm-file.txt
        if timeout 120 systemctl start $UNIT 2>/dev/null; then
                # A file written into the workspace: the files API opens every
                # path with openat2 (a named sandbox is forked from its
                # image's template without one).
                if out=$(timeout 300 codecage sandbox create nsbox 2>&1) &&
                        out=$(timeout 120 codecage sandbox cp /tmp/codecage-vm-file.txt nsbox:f.txt 2>&1); then
                        echo "created a sandbox and wrote a file into it with $option: $out"
                        timeout 120 systemctl stop $UNIT
                        return 1
                fi
                refused="refused: $(echo "$out" | head -1)"
        else
                refused="the server did not start: $(journalctl -u $UNIT -n 30 --no-pager -o cat |
                        grep '^codecage: ' | tail -1)"
        fi
        timeout 120 systemctl stop $UNIT
        systemctl reset-failed $UNIT 2>/dev/null
        rm -rf $DROPIN
        systemctl daemon-reload
        timeout 120 systemctl start $UNIT || { echo "$refused; and no start without it"; return 1; }
        out=$(timeout 300 codecage sandbox create ok-again 2>&1 &&
                timeout 120 codecage sandbox cp /tmp/codecage-vm-file.txt ok-again:f.txt 2>&1) ||
                { echo "$refused; and without it it still fails: $out"; return 1; }
        codecage sandbox rm ok-again >/dev/null
        timeout 120 systemctl stop $UNIT
        echo "$refused; without it, creating and writing a file work"
}

t_checks=$SECONDS
check active check_active
watchdog_first=$(prop WatchdogTimestampMonotonic)
check sandbox-create check_create
check sandbox-exec check_exec
check python-session check_python_session
check one-shot-run check_one_shot_run
check delegated-cgroup check_delegation
check reload check_reload
check watchdog check_watchdog "$watchdog_first"
check stop-drains check_stop_drains
echo "codecage-vm: systemd stage: the controls make codecage.service fail on purpose"
check restrict-namespaces-breaks check_option_breaks RestrictNamespaces=yes
check restrict-suid-sgid-breaks check_option_breaks RestrictSUIDSGID=yes
echo "codecage-vm: systemd stage: checks took $((SECONDS - t_checks)) s"
echo "$passed passed, $failed failed"
echo "codecage-vm: stage systemd exited with $((failed > 0)) ($(($(date +%s) - t_begin)) s)"
sync
exit $((failed > 0))
