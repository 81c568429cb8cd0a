# bench/lib.sh — what the server benchmarks share; sourced, not run.
#
# server_up PORT PID [TRIES]: waits until http://127.0.0.1:PORT/health answers 200 (llama-server
# answers 503 while it loads), polling every half second, TRIES times at most (600: five minutes).
# 0 when it does; 1 when process PID exits first or the time runs out (the caller says why).
server_up() {
    local port=$1 pid=$2 tries=${3:-600}
    for _ in $(seq 1 "$tries"); do
        python3 -c "import http.client, sys; c = http.client.HTTPConnection('127.0.0.1', $port, timeout=2); c.request('GET', '/health'); sys.exit(c.getresponse().status != 200)" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.5
    done
    return 1
}
