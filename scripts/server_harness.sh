# Sourced by the benchmark scripts: one way to start a real pagoda-server on
# loopback, wait for its port and stop it, so that each script says only
# what it measures.
#   source scripts/server_harness.sh   # needs WORK (a scratch directory)
#   start_server BINARY [flags...]     # sets SERVER_PID and PORT; waits
#                                      # SERVER_START_SECONDS (default 30)
#   stop_server                        # SIGTERM (the server drains), then waits
# Lines the server printed are in "$WORK/server.out" (PAGODA_HTTP_LISTENING,
# PAGODA_METRICS_LISTENING, PAGODA_WORKER_PIDS...), its log in
# "$WORK/server.log". The EXIT trap stops the server and removes WORK.

SERVER_PID=""
PORT=""

stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || true
  fi
  SERVER_PID=""
}

# The value after MARKER in the server's stdout, or nothing yet.
server_line() {
  awk -v marker="$1" '$1 == marker {print $2}' "$WORK/server.out" 2>/dev/null || true
}

start_server() {
  local binary=$1
  shift
  rm -f "$WORK/server.out"
  "$binary" --port 0 "$@" > "$WORK/server.out" 2> "$WORK/server.log" &
  SERVER_PID=$!
  PORT=""
  for _ in $(seq 1 $((${SERVER_START_SECONDS:-30} * 10))); do
    PORT=$(server_line PAGODA_SERVER_LISTENING)
    [ -n "$PORT" ] && return 0
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      cat "$WORK/server.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "$(basename "$0"): the server did not start within ${SERVER_START_SECONDS:-30} s" >&2
  exit 1
}

trap 'stop_server; rm -rf "$WORK"' EXIT
