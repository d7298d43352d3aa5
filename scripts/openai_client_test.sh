#!/usr/bin/env bash
# The server under the official `openai` Python client: builds `examples/serve.rs` (cargo
# arguments from the command line, default `--features server`; `server` is always added),
# starts it on the tiny test model (`tests/models/llama31_tiny`, tokenizer
# `tests/text/tokenizers/llama3_style`) on Flex with an API key, on a free port, runs
# `tests/openai_client.py` in a virtual environment (target/openai-venv, `pip install openai`),
# then stops the server with SIGTERM and checks that it exits 0. Fails loudly when the venv or
# the client cannot be installed.
#
#   scripts/openai_client_test.sh [CARGO BUILD ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/openai-venv
# apt as root, or through passwordless sudo (as scripts/test.sh installs its packages).
as_root=()
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "== creating $venv"
  if ! python3 -m venv "$venv"; then
    # Debian's and Ubuntu's system python3 ships venv's ensurepip apart.
    rm -rf "$venv"
    if { [ "$(id -u)" = 0 ] || [ ${#as_root[@]} -gt 0 ]; } && command -v apt-get >/dev/null; then
      echo "== installing python3-venv"
      "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
      "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    if ! python3 -m venv "$venv"; then
      echo "error: python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
      exit 1
    fi
  fi
fi
if ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
  echo "== pip install openai"
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check openai; then
    echo "error: pip could not install the openai client; the server's client test cannot run" >&2
    exit 1
  fi
fi
"$venv/bin/python" -c "import openai; print('openai client', openai.__version__)"

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--features server)
echo "== cargo build --example serve ${args[*]} --features server"
cargo build --example serve "${args[@]}" --features server
binary="${CARGO_TARGET_DIR:-target}/debug/examples/serve"

log=$(mktemp)
key="sk-openai-client-test"
"$binary" --model tests/models/llama31_tiny --tokenizer tests/text/tokenizers/llama3_style \
  --device flex --port 0 --api-key "$key" --served-model-name llama31-tiny >"$log" 2>&1 &
pid=$!
stop_server() {
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
}
trap stop_server EXIT

url=""
for _ in $(seq 1 600); do
  url=$(sed -n 's/^listening on \(http:[^ ]*\)$/\1/p' "$log")
  [ -n "$url" ] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "error: the server exited before listening:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.2
done
if [ -z "$url" ]; then
  echo "error: the server did not listen within 120 s:" >&2
  cat "$log" >&2
  exit 1
fi
echo "== server at $url"

status=0
"$venv/bin/python" tests/openai_client.py "$url" "$key" llama31-tiny tests/text/chat_generate.json || status=$?

echo "== SIGTERM"
kill -TERM "$pid"
code=0
wait "$pid" || code=$?
trap - EXIT
echo "--- server log"
cat "$log"
rm -f "$log"
if [ "$code" != 0 ]; then
  echo "error: the server exited with status $code after SIGTERM (expected 0)" >&2
  exit 1
fi
echo "server exited 0 after SIGTERM"
exit "$status"
