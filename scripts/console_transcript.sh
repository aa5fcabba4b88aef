#!/bin/sh
# A real console session against a real coordinator and node (tiny model, loopback), for the README:
#   scripts/console_transcript.sh [BINARY] > bench/console/transcript-DATE.txt
# Each command is run with -c, as typed at the prompt, and printed after its "archipelago> " line.
set -eu
bin=${1:-build/apps/archipelago}
dir=$(mktemp -d)
trap 'kill $node $coordinator 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
head -c 32 /dev/urandom | base64 > "$dir/token"
head -c 32 /dev/urandom | base64 > "$dir/admin-token"
chmod 600 "$dir/token" "$dir/admin-token"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sets="--set model.preset=tiny --set data.tokenizer=bytes --set train.learners=2 --set train.max_seconds=0 \
      --set runtime.eval_interval_s=2 --set runtime.store_sync=false --set train.threads=1"
# shellcheck disable=SC2086
"$bin" coordinator --listen "127.0.0.1:$port" --run-dir "$dir/run" --token-file "$dir/token" \
  --admin-token-file "$dir/admin-token" $sets > "$dir/coordinator.out" 2> "$dir/coordinator.err" &
coordinator=$!
until grep -q "listening on" "$dir/coordinator.out" 2>/dev/null; do sleep 0.2; done
"$bin" node --coordinator "127.0.0.1:$port" --learners 2 --name node-a --token-file "$dir/token" \
  --set train.threads=1 > "$dir/node.out" 2> "$dir/node.err" &
node=$!
sleep 20
for command in "status" "learners" "nodes" "versions" "kill learner learner-1" "events 4" "audit 2"; do
  echo "archipelago> $command"
  "$bin" console "127.0.0.1:$port" --admin-token-file "$dir/admin-token" -c "$command" || true
  [ "$command" = "kill learner learner-1" ] && sleep 3
done
