#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# twheel-redis against a real redis-server (run by with_redis, which appends
# the server's address): every command, bad arguments (exit 2 and a usage
# line), a server away (exit 1 and a clear message), and /metrics served
# over HTTP, its text checked by promtool (Debian package prometheus; only
# those checks are skipped, with a message, when promtool is missing).
#
#   test_redis_cli.sh TWHEEL_REDIS REDIS_WORKER HOST:PORT
set -u
T=$1 WORKER=$2 ADDR=$3
Q=cliq
fails=0
tmp=$(mktemp -d)
wpid= mpid=
cleanup() {
    [ -n "$wpid" ] && kill "$wpid" 2>/dev/null
    [ -n "$mpid" ] && kill "$mpid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# run WANT_EXIT ARGS...: runs the tool, output in $tmp/out and $tmp/err
run() {
    local want=$1
    shift
    "$T" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" != "$want" ]; then
        fail "twheel-redis $* exited $rc, wanted $want: $(head -c 300 "$tmp/err")"
    fi
}
has() { grep -q -- "$2" "$tmp/$1" || fail "$1 of the last command lacks '$2': $(head -c 300 "$tmp/$1")"; }
usage_line() { has err "^usage: twheel-redis "; }
C=(-u "$ADDR" -q "$Q")
have_promtool=1
command -v promtool >/dev/null || { have_promtool=0; echo "SKIP promtool checks: promtool is not installed (Debian package prometheus)"; }
promcheck() { # FILE
    [ $have_promtool = 1 ] || return 0
    promtool check metrics <"$1" >"$tmp/prom" 2>&1 || fail "promtool check metrics: $(cat "$tmp/prom")"
}

# ---- help, version, usage errors (exit 2 and a usage line) -----------------
run 0 --help; has out "^usage: twheel-redis"; has out "metrics \[--listen"
has out "^  dead list \[--count N\]"; has out "^  dead get KEY"; has out "^  dead requeue KEY|--all \[--delay MS\]"
has out "^  dead purge KEY|--all"; has out "^  dead count"; has out "^  schedule list"
has out "^  schedule set KEY (--cron EXPR | --every MS \[--anchor MS\]) \[--missed skip|once|all\] \[--payload P\]"
has out "^  schedule remove KEY"; has out "^  set \[--max-attempts N\] KEY"
run 0 --version; has out "twheel"
run 2; usage_line
run 2 "${C[@]}" nosuchcommand; usage_line
run 2 --bogus stats; usage_line
run 2 "${C[@]}" -p 0 stats; usage_line
run 2 "${C[@]}" -p x stats; usage_line
run 2 -u "redis://127.0.0.1:notaport" stats; usage_line
run 2 "${C[@]}" set onlykey; usage_line
run 2 "${C[@]}" set k notanumber; usage_line
run 2 "${C[@]}" set k -5; usage_line
run 2 "${C[@]}" get; usage_line
run 2 "${C[@]}" get a b; usage_line
run 2 "${C[@]}" list --limit 0; usage_line
run 2 "${C[@]}" list --limit 1001; usage_line
run 2 "${C[@]}" list --cursor nonsense; usage_line
run 2 "${C[@]}" list --nope 1; usage_line
run 2 "${C[@]}" move k; usage_line
run 2 "${C[@]}" remove; usage_line
run 2 "${C[@]}" pause extra; usage_line
run 2 "${C[@]}" drop --nope; usage_line
run 2 "${C[@]}" metrics --listen nocolon; usage_line
run 2 "${C[@]}" set --max-attempts 0 k 5; usage_line
run 2 "${C[@]}" set --max-attempts x k 5; usage_line
run 2 "${C[@]}" set --max-attempts 1048576 k 5; usage_line
run 2 "${C[@]}" dead; usage_line
run 2 "${C[@]}" dead bogus; usage_line
run 2 "${C[@]}" dead list extra; usage_line
run 2 "${C[@]}" dead list --count 0; usage_line
run 2 "${C[@]}" dead list --count x; usage_line
run 2 "${C[@]}" dead get; usage_line
run 2 "${C[@]}" dead get a b; usage_line
run 2 "${C[@]}" dead requeue; usage_line
run 2 "${C[@]}" dead requeue k --all; usage_line
run 2 "${C[@]}" dead requeue --all --delay x; usage_line
run 2 "${C[@]}" dead requeue k --nope; usage_line
run 2 "${C[@]}" dead purge; usage_line
run 2 "${C[@]}" dead purge a --all; usage_line
run 2 "${C[@]}" dead count extra; usage_line
run 2 "${C[@]}" schedule; usage_line
run 2 "${C[@]}" schedule list extra; usage_line
run 2 "${C[@]}" schedule set; usage_line
run 2 "${C[@]}" schedule set k; usage_line
run 2 "${C[@]}" schedule set k --cron "* * * * *" --every 60000; usage_line
run 2 "${C[@]}" schedule set k --cron "* * * * *" --anchor 5; usage_line
run 2 "${C[@]}" schedule set k --every 5; usage_line
run 2 "${C[@]}" schedule set k --every 60000 --missed never; usage_line
run 2 "${C[@]}" schedule set k --every; usage_line
run 2 "${C[@]}" schedule remove; usage_line

# ---- a server away, a queue that does not exist (exit 1, a clear message) ---
run 1 -u 127.0.0.1:1 -q "$Q" -t 300 stats; has err "cannot open queue"; has err "127.0.0.1:1"
run 1 "${C[@]}" stats; has err "queue $Q does not exist"
run 1 "${C[@]}" dead count; has err "queue $Q does not exist"
run 1 -u 127.0.0.1:1 -q "$Q" -t 300 dead list; has err "cannot open queue"
[ "$("$T" -u "$ADDR" -q "$Q" stats 2>&1 >/dev/null | wc -l)" = 1 ] || fail "one line of error"

# ---- set, get, list, move, remove --------------------------------------------
run 0 "${C[@]}" set a 60000 hello
run 0 "${C[@]}" set b 30000
run 0 "${C[@]}" set c 90000 "x y"
run 0 "${C[@]}" stats; has out "^partitions  1$"; has out "^pending     3"; has out "^waiting     3"
has out "^paused      no"
run 0 "${C[@]}" get a; has out "^state       waiting"; has out "^payload     hello"; has out "^attempt     0"
has out "^max_attempts 0 (the queue's)"
run 0 "${C[@]}" set --max-attempts 7 own 60000
run 0 "${C[@]}" get own; has out "^max_attempts 7$"; has out "^attempt     0"
run 0 "${C[@]}" remove own
run 1 "${C[@]}" get zzz; has err "no such task: zzz"
run 0 "${C[@]}" list
[ "$(cut -d' ' -f2 "$tmp/out" | tr '\n' ' ')" = "b a c " ] || fail "list order: $(cat "$tmp/out")"
run 0 "${C[@]}" list --limit 2
[ "$(grep -c -v '^#' "$tmp/out")" = 2 ] || fail "a page of 2: $(cat "$tmp/out")"
has out "^# next: twheel-redis list --cursor "
cur=$(sed -n 's/^# next: twheel-redis list --cursor //p' "$tmp/out")
run 0 "${C[@]}" list --limit 2 --cursor "$cur"
[ "$(cut -d' ' -f2 "$tmp/out")" = c ] || fail "the next page: $(cat "$tmp/out")"
run 0 "${C[@]}" list --limit 1 --all
[ "$(wc -l <"$tmp/out")" = 3 ] || fail "list --all: $(cat "$tmp/out")"
run 0 "${C[@]}" list --within 45000
[ "$(cut -d' ' -f2 "$tmp/out")" = b ] || fail "list --within: $(cat "$tmp/out")"
run 0 "${C[@]}" move a 120000
run 0 "${C[@]}" get a
due_in=$(sed -n 's/^due_in_ms *//p' "$tmp/out")
[ "$due_in" -gt 110000 ] && [ "$due_in" -le 120001 ] || fail "moved: due in $due_in ms"
run 1 "${C[@]}" move zzz 5; has err "no such task"
run 0 "${C[@]}" remove c
run 1 "${C[@]}" remove c; has err "no such task: c"
run 0 "${C[@]}" stats; has out "^pending     2"

# ---- pause, resume, with a worker ----------------------------------------------
"$WORKER" --servers "$ADDR" --queue "$Q" --out "$tmp/deliveries" \
    --fail-prefix f >"$tmp/worker.log" 2>&1 &
wpid=$!
run 0 "${C[@]}" pause
run 0 "${C[@]}" stats; has out "^paused      yes"
run 0 "${C[@]}" set now1 0 p
run 0 "${C[@]}" set now2 10 p
sleep 1.5
[ -s "$tmp/deliveries" ] && fail "delivered while paused: $(cat "$tmp/deliveries")"
run 0 "${C[@]}" resume
run 0 "${C[@]}" stats; has out "^paused      no"
for _ in $(seq 50); do [ "$(wc -l <"$tmp/deliveries" 2>/dev/null || echo 0)" -ge 2 ] && break; sleep 0.1; done
[ "$(wc -l <"$tmp/deliveries" 2>/dev/null || echo 0)" = 2 ] || fail "resumed: $(cat "$tmp/deliveries" 2>/dev/null)"

# ---- dead letters (the worker answers FAILED for keys f*) ---------------------------
# wait_dead N: until `dead count` says N (5 s at most)
wait_dead() {
    for _ in $(seq 50); do [ "$("$T" "${C[@]}" dead count)" = "$1" ] && break; sleep 0.1; done
    run 0 "${C[@]}" dead count; [ "$(cat "$tmp/out")" = "$1" ] || fail "dead count $(cat "$tmp/out"), wanted $1"
}
run 0 "${C[@]}" dead count; [ "$(cat "$tmp/out")" = 0 ] || fail "dead count: $(cat "$tmp/out")"
run 0 "${C[@]}" set --max-attempts 1 fa 0 x
run 0 "${C[@]}" set --max-attempts 1 fb 0 y
wait_dead 2
run 0 "${C[@]}" stats; has out "^dead        2"
run 0 "${C[@]}" dead list; has out "^fa attempt=1 max_attempts=1 dead_ms=[0-9]* due_ms=[0-9]* error=failed on purpose$"
[ "$(grep -c -v '^#' "$tmp/out")" = 2 ] || fail "dead list: $(cat "$tmp/out")"
run 0 "${C[@]}" dead list --count 1
[ "$(grep -c -v '^#' "$tmp/out")" = 1 ] || fail "dead list --count 1: $(cat "$tmp/out")"
run 0 "${C[@]}" dead get fa; has out "^error        failed on purpose"; has out "^payload      x"
has out "^attempt      1"
run 1 "${C[@]}" dead get nope; has err "no such dead letter: nope"
run 0 "${C[@]}" dead requeue fa --delay 600000
run 0 "${C[@]}" get fa; has out "^state       waiting"; has out "^attempt     0"; has out "^max_attempts 1$"
run 0 "${C[@]}" remove fa
run 0 "${C[@]}" dead requeue --all; has out "^requeued 1"
wait_dead 1 # fb failed again: its limit is 1
run 0 "${C[@]}" dead purge fb
run 1 "${C[@]}" dead purge fb; has err "no such dead letter: fb"
run 1 "${C[@]}" dead requeue fb; has err "no such dead letter: fb"
run 0 "${C[@]}" set --max-attempts 1 fc 0
wait_dead 1
run 0 "${C[@]}" dead purge --all
run 0 "${C[@]}" dead count; [ "$(cat "$tmp/out")" = 0 ] || fail "purged: $(cat "$tmp/out")"
run 0 "${C[@]}" dead requeue --all --delay 5; has out "^requeued 0"

# ---- schedules ---------------------------------------------------------------------
later=$(( $(date +%s) * 1000 + 3600000 ))
run 0 "${C[@]}" schedule set s1 --every 60000 --anchor "$later" --payload pp --missed once
has out "^next_ms $later$"
run 0 "${C[@]}" schedule set s2 --cron "0 0 1 1 *"
run 2 "${C[@]}" schedule set s3 --cron "bad"; usage_line
run 2 "${C[@]}" schedule set s3 --cron "0 0 31 2 *"; usage_line # never matches
run 0 "${C[@]}" schedule list
has out "^s1 next_ms=$later missed=once spec=every 60000 $later payload=pp$"
has out "^s2 next_ms=[0-9]* missed=skip spec=cron 0 0 1 1 \* payload=$"
[ "$(wc -l <"$tmp/out")" = 2 ] || fail "schedule list: $(cat "$tmp/out")"
run 0 "${C[@]}" stats; has out "^schedules   2"
run 0 "${C[@]}" schedule remove s1
run 1 "${C[@]}" schedule remove s1; has err "no such schedule: s1"
run 0 "${C[@]}" schedule list; [ "$(wc -l <"$tmp/out")" = 1 ] || fail "removed: $(cat "$tmp/out")"
# s2 and a dead letter stay: the metrics show them, drop deletes them

# ---- drop: refused while a worker runs -------------------------------------------
run 1 "${C[@]}" drop; has err "worker running"
for _ in $(seq 50); do # the deliveries' acknowledgements (delayed up to 100 ms)
    "$T" "${C[@]}" stats | grep -q "^pending     2" && break
    sleep 0.1
done
run 0 "${C[@]}" stats; has out "^pending     2"

# ---- metrics: printed, then served over HTTP -------------------------------------
run 0 "${C[@]}" set --max-attempts 1 fz 0
wait_dead 1
run 0 "${C[@]}" metrics
has out '^twheel_redis_tasks{queue="cliq",state="waiting"} 2$'
has out '^twheel_redis_dead_letters{queue="cliq"} 1$'
has out '^twheel_redis_schedules{queue="cliq"} 1$'
cp "$tmp/out" "$tmp/metrics.txt"; promcheck "$tmp/metrics.txt"
"$T" "${C[@]}" metrics --listen 127.0.0.1:0 >"$tmp/listen" 2>&1 &
mpid=$!
port=
for _ in $(seq 50); do
    port=$(sed -n 's/.* on port \([0-9]*\)$/\1/p' "$tmp/listen")
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || fail "metrics --listen: no port: $(cat "$tmp/listen")"
# http REQUEST: the raw answer in $tmp/http
http() {
    exec 3<>"/dev/tcp/127.0.0.1/$port" || { fail "connect to $port"; return; }
    printf '%b' "$1" >&3
    timeout 10 cat <&3 >"$tmp/http"
    exec 3<&-
}
http 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n'
head -1 "$tmp/http" | grep -q "^HTTP/1.1 200 OK" || fail "GET /metrics: $(head -3 "$tmp/http")"
grep -q "^Content-Type: text/plain; version=0.0.4" "$tmp/http" || fail "content type"
sed '1,/^\r$/d' "$tmp/http" >"$tmp/body"
grep -q '^twheel_redis_queue_up{queue="cliq"} 1' "$tmp/body" || fail "/metrics body: $(head -5 "$tmp/body")"
promcheck "$tmp/body"
http 'GET /other HTTP/1.1\r\n\r\n'; head -1 "$tmp/http" | grep -q " 404 " || fail "404: $(head -1 "$tmp/http")"
http 'POST /metrics HTTP/1.1\r\n\r\n'; head -1 "$tmp/http" | grep -q " 405 " || fail "405: $(head -1 "$tmp/http")"
http 'garbage\r\n\r\n'; head -1 "$tmp/http" | grep -q " 400 " || fail "400: $(head -1 "$tmp/http")"
http "GET /metrics HTTP/1.1\r\nX: $(head -c 9000 /dev/zero | tr '\0' a)\r\n\r\n"
head -1 "$tmp/http" | grep -q " 400 " || fail "too long: $(head -1 "$tmp/http")"
# a client that sends nothing is dropped after 2 s; the next is served
exec 4<>"/dev/tcp/127.0.0.1/$port"
http 'HEAD /metrics HTTP/1.0\r\n\r\n'
head -1 "$tmp/http" | grep -q " 200 " || fail "after a silent client: $(head -1 "$tmp/http")"
exec 4<&-
kill -TERM "$mpid"; wait "$mpid"; rc=$?; mpid=
[ "$rc" = 0 ] || fail "metrics --listen exited $rc on SIGTERM"

# ---- drop: forced while the worker runs, then the queue is gone ------------------
run 0 "${C[@]}" drop --force
kill -TERM "$wpid"; wait "$wpid"; wpid=
rcli() { redis-cli -h "${ADDR%:*}" -p "${ADDR##*:}" "$@"; }
for _ in $(seq 100); do # the stopped worker's holds expire (2 * window + 1 s)
    [ -z "$(rcli --scan --pattern "{$Q:*}:hold")" ] && break
    sleep 0.1
done
run 0 "${C[@]}" -p 4 set again 1000
run 0 "${C[@]}" pause
run 0 "${C[@]}" drop
run 1 "${C[@]}" stats; has err "does not exist"
left=$(rcli --scan --pattern "{$Q:*" | grep -v '}:r:' | wc -l)
[ "$left" = 0 ] || fail "keys left after drop: $left"

if [ "$fails" != 0 ]; then
    echo "$fails checks failed"
    exit 1
fi
echo "twheel-redis: every check passed"
