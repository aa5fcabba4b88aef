#!/usr/bin/env bash
# The three-site run: a coordinator in namespace <prefix>-hub and a node of two learners in each of
# <prefix>-east and <prefix>-west (tests/sites/netns.sh: tbf-limited veths), with the [links] of
# config/sites/three-sites.toml emulated by the transport, over mutual TLS with certificates of a run
# CA made by `archipelago ca`. Checks that the run trains over TLS, that both
# sides of every link counted the same bytes, and that the cross-site bytes match what the model
# size, the codec and the number of syncs predict, within 10%.
#
#   tests/sites/three_sites_test.sh <archipelago binary>
# Exit 0 pass, 1 fail, 77 skip (namespaces cannot be created here: see netns.sh).
set -euo pipefail

readonly BIN=${1:?usage: $0 <archipelago binary>}
readonly HERE=$(cd "$(dirname "$0")" && pwd)
readonly ROOT=$(cd "$HERE/../.." && pwd)
WORK=$(mktemp -d /tmp/arch-sites.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

[[ $EUID -eq 0 ]] || { echo "SKIP: network namespaces need root (CAP_NET_ADMIN)"; exit 77; }
command -v perl >/dev/null && perl -MJSON::PP -e1 2>/dev/null || { echo "SKIP: perl with JSON::PP is needed"; exit 77; }

printf 'three-sites-test-secret-%s\n' "$RANDOM$RANDOM$RANDOM" >"$WORK/token"
chmod 600 "$WORK/token"
readonly DATA=${TMPDIR:-/tmp}/archipelago-test-data
readonly SETS=(--set model.preset=tiny --set data.tokenizer=bytes --set train.learners=4 --set inner.batch_size=8 --set data.eval_batches=2
  --set train.inner_steps=20 --set runtime.store_sync=false --set train.threads=1 --set "data.cache_dir=$DATA"
  --set runtime.drain_timeout_s=5 --set inner.warmup_steps=10 --set train.max_seconds=20 --set outer.codec=fp32 --set outer.downlink_codec=fp32)

# The run's CA: the hub's certificate names its address (the nodes verify it), every node's is signed.
"$BIN" ca init "$WORK/ca" >/dev/null
"$BIN" ca issue "$WORK/ca" hub --host 10.77.0.1 >/dev/null
tls_config() {  # NAME -> a [net] table with NAME's certificate
  printf '[net]\ntls = true\ntls_certificate = "%s"\ntls_key = "%s"\ntls_ca = "%s"\n' \
    "$WORK/ca/$1.pem" "$WORK/ca/$1.key" "$WORK/ca/ca.pem" >"$WORK/$1-tls.toml"
}
readonly HUB_TLS=(--set net.tls=true --set "net.tls_certificate=$WORK/ca/hub.pem" --set "net.tls_key=$WORK/ca/hub.key"
  --set "net.tls_ca=$WORK/ca/ca.pem")

# One script per site; netns.sh runs each in its namespace.
{
  echo "exec timeout 150 $(printf '%q ' "$BIN" coordinator --json --config "$ROOT/config/sites/three-sites.toml" \
    --listen 10.77.0.1:4242 --run-dir "$WORK/run" --token-file "$WORK/token" "${SETS[@]}" "${HUB_TLS[@]}") >'$WORK/hub.out' 2>'$WORK/hub.err'"
} >"$WORK/hub.sh"
for site in east west; do
  "$BIN" ca issue "$WORK/ca" "$site" >/dev/null
  tls_config "$site"
  echo "exec timeout 150 $(printf '%q ' "$BIN" node --json --coordinator 10.77.0.1:4242 --site "$site" --name "$site" \
    --learners 2 --token-file "$WORK/token" --config "$WORK/$site-tls.toml" --set train.threads=1 --set "data.cache_dir=$DATA") >'$WORK/$site.out' 2>'$WORK/$site.err'" >"$WORK/$site.sh"
done

status=0
ARCH_NETNS_PREFIX=${ARCH_NETNS_PREFIX:-archt} bash "$HERE/netns.sh" run -- bash "$WORK/hub.sh" -- bash "$WORK/east.sh" \
  -- bash "$WORK/west.sh" || status=$?
if ((status == 77)); then exit 77; fi
if ((status != 0)); then
  for f in hub east west; do echo "--- $f"; tail -n 30 "$WORK/$f.out" "$WORK/$f.err" 2>/dev/null || true; done
  echo "FAIL: the three-site run exited with $status"
  exit 1
fi

# Last stdout line of each process is its JSON summary.
perl -MJSON::PP -e '
  my ($work) = @ARGV;
  sub summary { open(my $f, "<", "$work/$_[0].out") or die "no $_[0].out"; my @l = grep { /^\{/ } <$f>;
                return decode_json($l[-1]); }
  my ($hub, $east, $west) = map { summary($_) } qw(hub east west);
  my $fail = 0;
  sub check { my ($ok, $what) = @_; printf "%s %s\n", $ok ? "ok  " : "FAIL", $what; $fail ||= !$ok; }
  check($hub->{tls}, "the coordinator served mutual TLS");
  check($hub->{versions_committed} > 0, "versions committed: $hub->{versions_committed}");
  check($hub->{heldout_loss} < $hub->{initial_heldout_loss},
        "held-out loss $hub->{initial_heldout_loss} -> $hub->{heldout_loss}");
  my ($sent, $received, $predicted) = (0, 0, 0);
  my $fragment_bytes = 4 * $hub->{parameters} / scalar(@{$hub->{fragment_numel}});  # fp32 on both directions
  for my $link (@{$hub->{links}}) {
    check($link->{cross_site}, "link to $link->{node} ($link->{site}) is cross-site");
    $sent += $link->{bytes_sent};
    $received += $link->{bytes_received};
    $predicted += ($link->{updates_received} + $link->{global_fragments_sent}) * $fragment_bytes;
  }
  my $nodes_sent = $east->{bytes_sent} + $west->{bytes_sent};
  my $nodes_received = $east->{bytes_received} + $west->{bytes_received};
  # Both sides count bytes as they cross the transport; a node may still send a last heartbeat as the
  # coordinator goes away, hence "at most, and within 1%".
  check($received <= $nodes_sent && $received >= 0.99 * $nodes_sent,
        "node -> coordinator bytes: nodes sent $nodes_sent, coordinator received $received");
  check($nodes_received <= $sent && $nodes_received >= 0.9 * $sent,
        "coordinator -> node bytes: coordinator sent $sent, nodes received $nodes_received");
  my $cross = $hub->{bytes_cross_site};
  check($cross == $sent + $received, "bytes_cross_site $cross = links sent + received");
  my $ratio = $cross / $predicted;
  check(abs($ratio - 1) <= 0.10, sprintf("cross-site bytes %d vs %d predicted from model size, codec and syncs (%.3f)",
                                          $cross, $predicted, $ratio));
  my $dp = $hub->{cross_site_vs_data_parallel};
  check(defined $dp && $dp->{fraction_of_data_parallel} < 1,
        sprintf("cross-site bytes per token %.1f vs data-parallel %.1f", $dp->{cross_site_bytes_per_token} // -1,
                $dp->{data_parallel_bytes_per_token} // -1));
  check($east->{uplink}{latency_ms} == 25 && $west->{uplink}{latency_ms} == 40, "uplinks emulate [links]");
  exit($fail ? 1 : 0);
' "$WORK" || { for f in hub east west; do echo "--- $f"; tail -n 5 "$WORK/$f.out"; done; exit 1; }
echo "three-site run: pass"
