#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The scene tools' command lines and verdicts:
#
#   tests/test_tools_cli.sh path/to/twheel-idled path/to/twheel-load
#
#  - --version and --help exit 0; every usage error exits 2 (both tools);
#  - twheel-load judges correctness only: closes later than the allowance
#    (a server with a 50 ms tick judged against 1 ms and no slack) still PASS
#    with exit 0 and are reported as timeliness with the machine's load; an
#    early close (a server timeout shorter than the load's) is a FAIL, exit 1;
#  - SIGTERM and SIGINT end a load run with the report so far (exit 3,
#    INCONCLUSIVE, interrupted=1).
# About 8 s. Registered with CTest under the label "scene".
set -u
SRV=${1:?server binary}
LOAD=${2:?load binary}
TMP=$(mktemp -d)
failures=0
server_pid=""

cleanup() {
    [ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# expect STATUS DESCRIPTION COMMAND...: run it, check its exit status.
expect() {
    local want=$1 what=$2 rc=0
    shift 2
    "$@" >"$TMP/out" 2>&1 || rc=$?
    if [ "$rc" = "$want" ]; then
        echo "ok: $what (exit $rc)"
    else
        sed 's/^/  | /' "$TMP/out"
        fail "$what: exit $rc, want $want"
    fi
}

echo "=== command lines"
for tool in "$SRV" "$LOAD"; do
    name=${tool##*/}
    expect 0 "$name --version" "$tool" --version
    grep -q "^$name (twheel [0-9]*\.[0-9]*\.[0-9]*)$" "$TMP/out" || fail "$name --version says: $(cat "$TMP/out")"
    expect 0 "$name --help" "$tool" --help
    grep -q "Exit status" "$TMP/out" || fail "$name --help does not document its exit status"
    expect 2 "$name unknown option" "$tool" --no-such-option
    expect 2 "$name option without its value" "$tool" --timeout
    expect 2 "$name bad number" "$tool" --timeout abc
done
expect 2 "twheel-idled --bind not an address" "$SRV" --bind not.an.address --port 0
expect 2 "twheel-load without --port" "$LOAD" --conns 5

# start_server ARGS...: in the background; sets server_pid and port.
start_server() {
    # Emptied here, not by the background job's redirection: on a busy
    # machine the loop below could otherwise read the previous server's port
    # before the new job truncates the file.
    : >"$TMP/server.out"
    "$SRV" --port 0 --stats 0 "$@" >"$TMP/server.out" 2>&1 &
    server_pid=$!
    port=""
    for _ in $(seq 100); do
        port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$TMP/server.out")
        [ -n "$port" ] && return 0
        sleep 0.05
    done
    fail "server did not start"
    return 1
}

stop_server() {
    kill -INT "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    server_pid=""
}

result() { sed -n "s/^RESULT .*\\b$1=\\([^ ]*\\).*/\\1/p" "$TMP/load.out"; }

echo "=== late closes are timeliness, not failure"
if start_server --timeout 1 --tick 50; then
    rc=0
    "$LOAD" --port "$port" --conns 50 --timeout 1 --tick 1 --slack 0 --interval 0.3 \
        --silent 0.2 --silent-window 0.5 --margin 0.5 >"$TMP/load.out" 2>&1 || rc=$?
    grep -E '^(  timeliness|RESULT)' "$TMP/load.out" | sed 's/^/  | /'
    [ "$rc" = 0 ] || fail "late closes: exit $rc, want 0"
    [ "$(result verdict)" = PASS ] || fail "late closes: verdict $(result verdict), want PASS"
    [ "$(result late)" -gt 0 ] 2>/dev/null || fail "late closes: none counted late (late=$(result late))"
    case $(result timeliness) in late | late-busy) ;; *) fail "timeliness=$(result timeliness), want late*" ;; esac
    grep -q '^  timeliness: .*load' "$TMP/load.out" || fail "no timeliness line with the machine's load"
    stop_server
fi

echo "=== an early close fails"
if start_server --timeout 0.5 --tick 1; then
    rc=0
    "$LOAD" --port "$port" --conns 50 --timeout 1 --tick 1 --slack 25 --interval 0.2 \
        --silent 0.2 --silent-window 0.5 --margin 0.5 >"$TMP/load.out" 2>&1 || rc=$?
    grep '^RESULT' "$TMP/load.out" | sed 's/^/  | /'
    [ "$rc" = 1 ] || fail "early closes: exit $rc, want 1"
    [ "$(result verdict)" = FAIL ] || fail "early closes: verdict $(result verdict), want FAIL"
    [ "$(result early)" = 10 ] || fail "early closes: early=$(result early), want 10"
    stop_server
fi

for sig in TERM INT; do
    echo "=== SIG$sig: the report so far"
    start_server --timeout 30 --tick 1 || continue
    "$LOAD" --port "$port" --conns 20 --timeout 30 --interval 0.2 >"$TMP/load.out" 2>&1 &
    load_pid=$!
    sleep 1
    kill -"$sig" "$load_pid"
    rc=0
    wait "$load_pid" || rc=$?
    [ "$rc" = 3 ] || fail "SIG$sig: exit $rc, want 3"
    grep -q "interrupted by SIG$sig" "$TMP/load.out" || fail "SIG$sig: no interruption notice"
    grep -q '^RESULT .*interrupted=1 verdict=INCONCLUSIVE' "$TMP/load.out" ||
        fail "SIG$sig: no RESULT line"
    stop_server
done

if [ "$failures" = 0 ]; then
    echo "tools cli: PASS"
    exit 0
fi
echo "tools cli: $failures failure(s)"
exit 1
