#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The connection scene, small: twheel-idled and twheel-load on loopback.
#
#   tests/test_idle_scene.sh path/to/twheel-idled path/to/twheel-load
#
# For each strategy (wheel, scan): 500 connections, 2 s timeout, 20% go silent.
# Asserts the load's verdict (every silent one closed, none early, no live one
# closed; lateness is printed with the machine's load, never asserted), that
# the server holds no
# connection fd once the load has gone, and that it shuts down cleanly on
# SIGINT / SIGTERM (exit 0, as many fds at exit as at start), and that it
# asked for no timer slack. Then shuts a
# server down with connections still open, and checks they are all closed.
# Then runs one out of descriptors (a low `ulimit -n`, more clients than fit):
# it must refuse the extra ones without spinning, accept again once clients
# leave, and still stop promptly on SIGTERM.
# The allowance is generous (tick 10 ms + 250 ms): this runs alone (label
# timing) but under sanitizers and on a shared machine; the distribution is
# printed either way. Registered with CTest under the label "scene".
set -u
SRV=${1:?server binary}
LOAD=${2:?load binary}
TMP=$(mktemp -d)
failures=0
server_pid=""
nofile="" # when set, start_server runs the server under `ulimit -n $nofile`

cleanup() {
    [ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# start_server OUT ARGS...: start it in the background, wait for its port.
start_server() {
    local out=$1
    shift
    : >"$out" # emptied before the job starts: never read a previous server's port
    if [ -n "$nofile" ]; then
        # Soft and hard: the server raises its soft limit to the hard one.
        (ulimit -n "$nofile" && exec "$SRV" --port 0 --stats 0 "$@") >"$out" 2>&1 &
    else
        "$SRV" --port 0 --stats 0 "$@" >"$out" 2>&1 &
    fi
    server_pid=$!
    port=""
    for _ in $(seq 100); do
        port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$out")
        [ -n "$port" ] && return 0
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    cat "$out"
    fail "server did not start"
    return 1
}

fd_count() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }

# wait_fds PID N: wait (up to 5 s) until the process holds N fds; 0 if it did.
wait_fds() {
    for _ in $(seq 50); do
        [ "$(fd_count "$1")" = "$2" ] && return 0
        sleep 0.1
    done
    return 1
}

# CPU time (user + system) of a process so far, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null; }

# stop_server SIGNAL OUT: signal it, wait for it, check exit status 0.
stop_server() {
    kill -"$1" "$server_pid"
    local rc=0
    wait "$server_pid" || rc=$?
    server_pid=""
    [ "$rc" = 0 ] || fail "server exit status $rc after SIG$1 (3 means an fd leak)"
}

summary_field() { sed -n "s/^SUMMARY \(.* \)\{0,1\}$2=\([^ ]*\).*/\2/p" "$1"; }

for strategy in wheel scan; do
    [ "$strategy" = wheel ] && sig=INT || sig=TERM
    echo "=== $strategy: 500 connections, timeout 2 s, 100 go silent; shutdown by SIG$sig"
    out=$TMP/server-$strategy.out
    start_server "$out" --strategy "$strategy" --timeout 2 --tick 10 || continue
    base=$(fd_count "$server_pid")
    # It sleeps to tick boundaries without the kernel's 50 us of timer slack.
    slack=$(cat "/proc/$server_pid/timerslack_ns" 2>/dev/null || echo 1)
    [ "$slack" = 1 ] || fail "$strategy: server timer slack is $slack ns, not 1"
    "$LOAD" --port "$port" --conns 500 --timeout 2 --tick 10 --slack 250 --interval 0.5 \
        --silent 0.2 --silent-window 1 --margin 1 >"$TMP/load-$strategy.out" 2>&1
    load_rc=$?
    sed 's/^/  load: /' "$TMP/load-$strategy.out"
    [ "$load_rc" = 0 ] || fail "$strategy: load verdict exit status $load_rc"
    grep -q '^RESULT .* silent_closed=100 early=0 late=[0-9]* missed=0 .* wrong=0 .*verdict=PASS' \
        "$TMP/load-$strategy.out" || fail "$strategy: RESULT line is not a clean pass"
    # The load closed its live connections on exit: the server must let go of
    # every connection fd (it sees EOF on each), back to its base count.
    now=""
    for _ in $(seq 50); do
        now=$(fd_count "$server_pid")
        [ "$now" = "$base" ] && break
        sleep 0.1
    done
    [ "$now" = "$base" ] || fail "$strategy: server holds $now fds after the load left, $base before"
    stop_server "$sig"
    sed 's/^/  server: /' "$out"
    [ "$(summary_field "$out" accepted)" = 500 ] || fail "$strategy: server did not accept 500"
    # 100 silent ones, plus the live ones that the load generator itself left
    # silent for a whole timeout (it stalled on a busy machine: wrong_gap).
    gap=$(sed -n 's/^RESULT .* wrong_gap=\([0-9]*\).*/\1/p' "$TMP/load-$strategy.out")
    [ "$(summary_field "$out" idle_closed)" = $((100 + ${gap:-0})) ] ||
        fail "$strategy: server idle-closed $(summary_field "$out" idle_closed), not 100 + ${gap:-0}"
    [ "$(summary_field "$out" fds_start)" = "$(summary_field "$out" fds_end)" ] ||
        fail "$strategy: server fds at start and exit differ"
done

echo "=== shutdown with connections open"
out=$TMP/server-open.out
if start_server "$out" --strategy wheel --timeout 60; then
    base=$(fd_count "$server_pid")
    # Five connections from this shell, each with a heartbeat.
    for fd in 11 12 13 14 15; do
        eval "exec $fd<>/dev/tcp/127.0.0.1/$port" && echo hb >&"$fd"
    done
    # Once it holds five more fds it has accepted (and recorded) all five.
    wait_fds "$server_pid" $((base + 5)) ||
        fail "server holds $(fd_count "$server_pid") fds, not $base + 5 connections"
    stop_server TERM
    sed 's/^/  server: /' "$out"
    [ "$(summary_field "$out" shutdown_closed)" = 5 ] || fail "shutdown did not close the 5 open connections"
    [ "$(summary_field "$out" fds_start)" = "$(summary_field "$out" fds_end)" ] ||
        fail "server fds at start and exit differ"
    for fd in 11 12 13 14 15; do
        # The server closed them: reading gives EOF at once.
        if ! timeout 2 bash -c "cat <&$fd >/dev/null" 2>/dev/null; then
            fail "connection on fd $fd was not closed by the server"
        fi
        eval "exec $fd>&-"
    done
fi

echo "=== out of descriptors: ulimit -n 32, 48 clients"
out=$TMP/server-emfile.out
nofile=32
if start_server "$out" --strategy wheel --timeout 60; then
    nofile=""
    base=$(fd_count "$server_pid")
    clients=()
    for _ in $(seq 48); do
        exec {cfd}<>/dev/tcp/127.0.0.1/"$port" && clients+=("$cfd")
    done
    # The kernel completed every handshake; the server takes what fits (every
    # fd below 32 in use) and must refuse the rest (take each with its spare
    # fd and close it) without spinning: accept4 says EMFILE even when the
    # backlog is empty.
    full=0
    for _ in $(seq 50); do
        full=$(ls "/proc/$server_pid/fd" | awk '$1 < 32' | wc -l)
        [ "$full" = 32 ] && break
        sleep 0.1
    done
    [ "$full" = 32 ] || fail "emfile: server uses $full of its 32 fds with 48 clients waiting"
    c0=$(cpu_ticks "$server_pid")
    sleep 1
    c1=$(cpu_ticks "$server_pid")
    hz=$(getconf CLK_TCK)
    echo "  server CPU in the second after: $((c1 - c0)) of $hz ticks"
    [ $(((c1 - c0) * 4)) -lt "$hz" ] || fail "emfile: server busy ($((c1 - c0)) of $hz ticks in 1 s)"
    # Every client leaves; then a new one must be accepted again.
    for cfd in "${clients[@]}"; do exec {cfd}>&-; done
    wait_fds "$server_pid" "$base" ||
        fail "emfile: server holds $(fd_count "$server_pid") fds after the clients left, $base before"
    exec {cfd}<>/dev/tcp/127.0.0.1/"$port" && echo hb >&"$cfd"
    wait_fds "$server_pid" $((base + 1)) || fail "emfile: server did not accept after the clients left"
    # SIGTERM, with a deadline: a spinning loop never reads its signalfd.
    kill -TERM "$server_pid"
    for _ in $(seq 30); do
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$server_pid" 2>/dev/null; then
        fail "emfile: server still running 3 s after SIGTERM"
        kill -KILL "$server_pid"
    fi
    rc=0
    wait "$server_pid" || rc=$?
    server_pid=""
    exec {cfd}>&-
    sed 's/^/  server: /' "$out"
    [ "$rc" = 0 ] || fail "emfile: server exit status $rc after SIGTERM"
    accepted=$(summary_field "$out" accepted)
    refused=$(summary_field "$out" refused)
    [ "${refused:-0}" -gt 0 ] || fail "emfile: server refused no connection"
    [ $((${accepted:-0} + ${refused:-0})) = 49 ] ||
        fail "emfile: accepted $accepted + refused $refused is not the 49 connections made"
    [ "$(summary_field "$out" shutdown_closed)" = 1 ] || fail "emfile: shutdown did not close the last client"
    [ "$(summary_field "$out" fds_start)" = "$(summary_field "$out" fds_end)" ] ||
        fail "emfile: server fds at start and exit differ"
fi
nofile=""

if [ "$failures" = 0 ]; then
    echo "idle scene: PASS"
    exit 0
fi
echo "idle scene: $failures failure(s)"
exit 1
