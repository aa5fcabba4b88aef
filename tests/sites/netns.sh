#!/usr/bin/env bash
# Three emulated sites on one machine: network namespaces <prefix>-hub, <prefix>-east, <prefix>-west,
# joined pairwise by veth pairs whose both ends are rate-limited with tc tbf.
#
#   tests/sites/netns.sh selfcheck
#       build the sites, check every pair can connect both ways, measure each link's throughput
#       against its tbf rate (within 15%; a low reading is taken again, 3 readings at most), tear
#       down; exit 0 (pass) or 1 (fail).
#   tests/sites/netns.sh run -- <hub command...> -- <east command...> -- <west command...>
#       build the sites and run one command in each namespace, in parallel. When one fails the others
#       are stopped; the exit status is the first failure's (0 when all succeed). Each command sees
#       ARCH_SITE (hub|east|west) and ARCH_HUB_ADDR, ARCH_EAST_ADDR, ARCH_WEST_ADDR.
#
# Addressing: each site has one address on its loopback (hub 10.77.0.1, east 10.77.0.2, west
# 10.77.0.3, all /32) and a host route to each other site over the veth that joins them, so a site's
# address is the same whichever peer it talks to. Nothing is configured outside the namespaces this
# script creates, and everything is removed on exit (an EXIT trap), whatever the outcome.
#
# Rates (tbf, Mbit/s; defaults match config/sites/three-sites.toml): ARCH_NETNS_MBIT_HUB_EAST=100,
# ARCH_NETNS_MBIT_HUB_WEST=50, ARCH_NETNS_MBIT_EAST_WEST=20. Namespace prefix: ARCH_NETNS_PREFIX=arch.
# Latency cannot come from the kernel here (no netem): it is the project's own link emulation's job.
#
# Exit 77 (CTest's skip code) with "SKIP: <why>" when namespaces cannot be made: not root, no
# CAP_NET_ADMIN, or missing tools (ip, tc, perl for the measuring listener).
set -euo pipefail

readonly PREFIX=${ARCH_NETNS_PREFIX:-arch}
readonly SITES=(hub east west)
declare -A ADDRESS=([hub]=10.77.0.1 [east]=10.77.0.2 [west]=10.77.0.3)
# "from to mbit" per link; traffic is shaped in both directions at the same rate.
readonly LINKS=(
  "hub east ${ARCH_NETNS_MBIT_HUB_EAST:-100}"
  "hub west ${ARCH_NETNS_MBIT_HUB_WEST:-50}"
  "east west ${ARCH_NETNS_MBIT_EAST_WEST:-20}"
)
readonly TOLERANCE=0.15       # measured vs configured rate
readonly MEASURE_SECONDS=1.5  # each throughput measurement sends rate × this many seconds of data
readonly ATTEMPTS=3           # readings of a link below its band before it fails (see selfcheck)

WORK=""
CREATED=()  # namespaces this run made; only these are removed
PIDS=()     # background processes this run started

ns() { echo "${PREFIX}-$1"; }
skip() { echo "SKIP: $*"; exit 77; }
die() { echo "FAIL: $*" >&2; exit 1; }

teardown() {
  local pid name
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  # Anything still inside our namespaces was started by this run (e.g. a child of a command); a
  # namespace, and its veths, outlive `ip netns del` for as long as a process remains in it.
  for name in "${CREATED[@]}"; do
    for pid in $(ip netns pids "$name" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$name" 2>/dev/null || echo "warning: could not delete $name" >&2
  done
  [[ -n "$WORK" ]] && rm -rf "$WORK"
  return 0
}

preflight() {
  [[ $EUID -eq 0 ]] || skip "network namespaces need root (CAP_NET_ADMIN); run as root to check the sites"
  local tool
  for tool in ip tc perl awk timeout; do
    command -v "$tool" >/dev/null || skip "'$tool' is not installed"
  done
  perl -MIO::Socket::INET -e1 2>/dev/null || skip "perl lacks IO::Socket::INET"
  local name
  for name in "${SITES[@]}"; do
    if ip netns list | awk '{print $1}' | grep -qx "$(ns "$name")"; then
      die "namespace $(ns "$name") already exists (another run, or a stale one: ip netns del $(ns "$name"))"
    fi
  done
}

# Creates the namespaces, veth pairs, addresses, routes and tbf qdiscs.
build_sites() {
  local site first=1 error
  for site in "${SITES[@]}"; do
    if ! error=$(ip netns add "$(ns "$site")" 2>&1); then
      [[ $first == 1 ]] && skip "cannot create network namespaces: $error"
      die "ip netns add $(ns "$site"): $error"
    fi
    first=0
    CREATED+=("$(ns "$site")")
    ip -n "$(ns "$site")" link set lo up
    ip -n "$(ns "$site")" addr add "${ADDRESS[$site]}/32" dev lo
  done
  local link from to mbit
  for link in "${LINKS[@]}"; do
    read -r from to mbit <<<"$link"
    ip -n "$(ns "$from")" link add "to-$to" type veth peer name "to-$from" netns "$(ns "$to")"
    shape_end "$from" "$to" "$mbit"
    shape_end "$to" "$from" "$mbit"
  done
}

# tbf's bucket: 5 ms at the link's rate, at least 4000 bytes. With a bucket of a few frames (4 kB at
# 100 Mbit/s is 0.3 ms) the link only reaches its rate when the qdisc's timer fires on time; on a loaded
# host it read 80-86 Mbit/s of 100, three times running. 5 ms lets at most 62.5 kB through above the
# rate, 0.3 % of one throughput reading.
burst_bytes() { awk -v m="$1" 'BEGIN { b = m * 1e6 / 8 * 0.005; printf "%d", (b < 4000 ? 4000 : b) }'; }

# One end of a link: interface up, host route to the peer's address, tbf on egress.
shape_end() {
  local here=$1 peer=$2 mbit=$3
  ip -n "$(ns "$here")" link set "to-$peer" up
  ip -n "$(ns "$here")" route add "${ADDRESS[$peer]}/32" dev "to-$peer" src "${ADDRESS[$here]}"
  tc -n "$(ns "$here")" qdisc add dev "to-$peer" root tbf rate "${mbit}mbit" burst "$(burst_bytes "$mbit")" latency 400ms
}

# A one-connection TCP sink in `site`'s namespace: reports "<bytes after the first read> <seconds
# from the first read to EOF>" into $WORK/<tag>.result; touches $WORK/<tag>.ready once listening.
start_sink() {
  local site=$1 port=$2 tag=$3
  ip netns exec "$(ns "$site")" perl -MIO::Socket::INET -e '
    my ($address, $port, $ready, $result) = @ARGV;
    my $clock = eval { require Time::HiRes; \&Time::HiRes::time }
      || sub { open(my $u, "<", "/proc/uptime") or die; (split " ", scalar <$u>)[0] };
    my $server = IO::Socket::INET->new(LocalAddr => $address, LocalPort => $port, Listen => 1,
                                       ReuseAddr => 1, Proto => "tcp") or die "listen: $!";
    open(my $r, ">", $ready) or die; close $r;
    my $peer = $server->accept or die "accept: $!";
    my ($bytes, $start, $buffer) = (0, undef);
    while (my $n = sysread($peer, $buffer, 1 << 16)) {
      if (defined $start) { $bytes += $n } else { $start = $clock->() }
    }
    open(my $out, ">", $result) or die;
    printf $out "%d %.6f\n", $bytes, defined $start ? $clock->() - $start : 0;
  ' "${ADDRESS[$site]}" "$port" "$WORK/$tag.ready" "$WORK/$tag.result" &
  PIDS+=($!)
  local waited=0
  until [[ -e "$WORK/$tag.ready" ]]; do
    ((waited++ < 100)) || die "sink in $(ns "$site") did not start listening within 5 s"
    sleep 0.05
  done
}

# Sends `bytes` zero bytes from `from` to `to` over TCP; sets RESULT to the receiver's "<bytes> <seconds>".
# (A global rather than stdout: a $(...) subshell would hide the sink's pid from teardown.)
RESULT=""
transfer() {
  local from=$1 to=$2 bytes=$3 tag="$1-$2-${#PIDS[@]}"
  local sink_pid
  start_sink "$to" 5201 "$tag"
  sink_pid=${PIDS[-1]}
  ip netns exec "$(ns "$from")" timeout 20 bash -c \
    'head -c "$1" /dev/zero > "/dev/tcp/$2/5201"' _ "$bytes" "${ADDRESS[$to]}" ||
    die "$from -> $to: could not send $bytes bytes to ${ADDRESS[$to]}:5201"
  wait "$sink_pid" || die "$from -> $to: the receiving sink failed"
  RESULT=$(<"$WORK/$tag.result")
}

selfcheck() {
  local link from to mbit failures=0
  for link in "${LINKS[@]}"; do
    read -r from to mbit <<<"$link"
    # Connectivity both ways with a small transfer (there is no ping here).
    local pair a b
    for pair in "$from $to" "$to $from"; do
      read -r a b <<<"$pair"
      transfer "$a" "$b" 100000
      [[ ${RESULT%% *} -gt 0 ]] || die "$a -> $b: no bytes arrived"
    done
    # Throughput one way: rate × MEASURE_SECONDS of data. Shaping can only lower a rate, so one
    # reading above the band fails at once; a reading below it is taken again (up to ATTEMPTS in
    # all), because a stall of the host (CPU steal, a busy CI machine) also lowers a reading, and
    # a misconfigured shaper is low in every one.
    local bytes readings=0 verdict
    bytes=$(awk -v m="$mbit" -v s="$MEASURE_SECONDS" 'BEGIN { printf "%d", m * 1e6 / 8 * s }')
    while ((readings < ATTEMPTS)); do
      readings=$((readings + 1))
      transfer "$from" "$to" "$bytes"
      verdict=$(awk -v r="$RESULT" -v m="$mbit" -v tol="$TOLERANCE" -v link="$from -> $to" \
                    -v reading="$readings" 'BEGIN {
          split(r, f, " "); measured = f[1] * 8 / f[2] / 1e6
          # tbf counts Ethernet frames; a 1500-byte MTU TCP segment carries 1448 of 1514 bytes.
          printf "%s: %.1f Mbit/s TCP goodput over %.2f s (tbf %s mbit; %.1f Mbit/s on the wire; reading %d)\n",
                 link, measured, f[2], m, measured * 1514 / 1448, reading > "/dev/stderr"
          print (measured > m * (1 + tol) ? "high" : measured < m * (1 - tol) ? "low" : "within") }')
      [[ $verdict == low ]] || break
    done
    if [[ $verdict != within ]]; then
      echo "FAIL: $from -> $to is $verdict: outside ${mbit} Mbit/s ± 15% ($readings readings)" >&2
      failures=$((failures + 1))
    fi
  done
  ((failures == 0)) || exit 1
  echo "selfcheck: 3 sites, 3 links, all within 15% of their rates"
}

# run -- <hub cmd> -- <east cmd> -- <west cmd>
run_commands() {
  [[ ${1:-} == "--" ]] || die "usage: $0 run -- <hub command...> -- <east command...> -- <west command...>"
  shift
  # Each command becomes one shell-quoted string, so its arguments survive `bash -c` unchanged.
  local -a commands=() current=()
  local arg
  for arg in "$@" "--"; do
    if [[ $arg != "--" ]]; then current+=("$arg"); continue; fi
    ((${#current[@]} > 0)) || die "run: command $((${#commands[@]} + 1)) is empty"
    commands+=("$(printf '%q ' "${current[@]}")")
    current=()
  done
  ((${#commands[@]} == 3)) || die "run needs exactly three commands (hub, east, west), got ${#commands[@]}"

  local -A site_of=()
  local i site
  for i in 0 1 2; do
    site=${SITES[$i]}
    ip netns exec "$(ns "$site")" env ARCH_SITE="$site" ARCH_HUB_ADDR="${ADDRESS[hub]}" \
      ARCH_EAST_ADDR="${ADDRESS[east]}" ARCH_WEST_ADDR="${ADDRESS[west]}" \
      bash -c "exec ${commands[$i]}" &
    PIDS+=($!)
    site_of[$!]=$site
  done

  local status=0 finished code pid
  while ((${#site_of[@]} > 0)); do
    code=0
    finished=""
    wait -n -p finished "${!site_of[@]}" || code=$?
    if [[ -z $finished ]]; then
      # wait -n can miss a job that ended at the same moment as another; wait for the rest by pid.
      for pid in "${!site_of[@]}"; do
        code=0
        wait "$pid" || code=$?
        echo "netns run: ${site_of[$pid]} exited with $code" >&2
        ((status != 0)) || status=$code
      done
      break
    fi
    echo "netns run: ${site_of[$finished]} exited with $code" >&2
    unset "site_of[$finished]"
    if ((code != 0)); then
      status=$code
      for pid in "${!site_of[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
      for pid in "${!site_of[@]}"; do
        code=0
        wait "$pid" || code=$?
        echo "netns run: ${site_of[$pid]} stopped (exit $code) after the failure" >&2
      done
      break
    fi
  done
  return "$status"
}

main() {
  local mode=${1:-}
  case "$mode" in
    selfcheck | run) ;;
    *) echo "usage: $0 selfcheck | run -- <hub command...> -- <east command...> -- <west command...>" >&2; exit 2 ;;
  esac
  shift
  preflight
  trap teardown EXIT
  trap 'exit 130' INT TERM
  WORK=$(mktemp -d /tmp/arch-netns.XXXXXX)
  build_sites
  if [[ $mode == selfcheck ]]; then selfcheck; else run_commands "$@"; fi
}

main "$@"
