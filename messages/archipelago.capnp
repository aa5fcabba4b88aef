# The Archipelago wire protocol: every message between actors is one `Envelope`.
#
# Rules for changing this file (the wire contract):
# - Never renumber or retype a field; add new fields with the next ordinal.
# - New message kinds go at the end of `Envelope.body` (unions are extensible: an old reader sees
#   an unknown tag and rejects the message with `unknown_type` instead of misreading it).
# - Bump `kProtocolVersion` in messages/protocol.hpp only for changes an old peer cannot ignore.
# Actor code never touches these types: it uses the plain structs in messages/message_types.hpp
# through messages/envelope.hpp.
@0xb0c300a143f754dc;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("archipelago::messages::wire");

# How a float tensor is turned into bytes (see messages/tensor_codec.hpp for the layouts).
enum Codec {
  fp32 @0;         # 4 bytes per element, little-endian IEEE 754.
  bf16 @1;         # 2 bytes per element, round-to-nearest-even of the fp32 value.
  int8 @2;         # per-block (256) fp32 absmax scale, then one int8 per element.
  int4E2m1 @3;     # per-block (64) fp32 scale, then 4-bit floats E2M1 (default 4-bit codec).
  int4Uniform @4;  # per-block (64) fp32 scale, then 4-bit integers in [-7, 7].
}

# One piece of an encoded tensor. A tensor of `totalBytes` encoded bytes is cut into `chunkCount`
# chunks of `stride = roundUp8(ceil(totalBytes / chunkCount))` bytes (the last one shorter), so a
# receiver can place every chunk from (index, count, totalBytes) alone. See messages/chunking.hpp.
struct TensorChunk {
  codec @0 :Codec;          # codec of the whole tensor.
  elementCount @1 :UInt64;  # number of float elements of the whole tensor.
  totalBytes @2 :UInt64;    # encoded size of the whole tensor; must equal encodedSize(codec, elementCount).
  chunkIndex @3 :UInt32;    # 0-based position of this chunk; < chunkCount.
  chunkCount @4 :UInt32;    # number of chunks the tensor was cut into; >= 1.
  checksum @5 :UInt64;      # XXH3-64 of `payload`, checked by the reassembler.
  payload @6 :Data;         # this chunk's bytes of the encoded tensor (at most 4 MiB).
}

# learner -> syncer: ask to take part in the run.
struct Join {
  learnerId @0 :Text;   # stable id of the learner, e.g. "site-a/node-3/learner-0".
  node @1 :Text;        # host (process) that runs the learner.
  site @2 :Text;        # datacenter / island the node belongs to (for per-site accounting).
  device @3 :Text;      # "cpu", "cuda:0", ... (informational).
  speedHint @4 :Float64;  # expected tokens/s, used to size inner steps before real measurements.
  authToken @5 :Text;   # shared secret of the run; unauthenticated learners are refused.
  heldDigests @6 :List(UInt64);  # to the store: XXH3-64 of the fp32 bytes of each fragment the requester
                                 # already holds (index = fragment; empty = none); the store does not send
                                 # a fragment whose stored broadcast state has the same digest.
}

# Why a Welcome refuses. Control flow reads this code; `reason` is for people.
enum JoinRefusal {
  none @0;                # accepted
  unauthenticated @1;     # wrong or missing token, or an id that is not a learner's: do not retry
  unknownLearner @2;      # not joined (e.g. declared dead while only slow): join again
  noCommittedVersion @3;  # the store holds no version yet: fetch again later
  noFreeSlots @4;         # the gateway has no learner slots for this node now: retry
  badRequest @5;          # a malformed or out-of-range request
}

# syncer -> learner: answer to Join. The global state itself follows as GlobalFragment messages.
struct Welcome {
  version @0 :UInt64;        # latest committed global version the learner will receive.
  fragmentCount @1 :UInt32;  # number of parameter fragments the model is split into.
  accepted @2 :Bool;         # false: the learner must not train; see `reason`.
  reason @3 :Text;           # why the learner was refused (empty when accepted).
  heldFragments @4 :List(UInt32);  # from the store: fragments not sent because the requester holds them
                                   # (its held digest matched); the rest follow as GlobalFragment messages.
  fragmentVersions @5 :List(UInt64);  # from the store: the version each fragment last changed at (index = fragment).
  refusal @7 :JoinRefusal;         # why it is refused (none when accepted).
  receivedUntil @6 :List(UInt64);  # from the syncer (decoupled, async): per fragment, the `toStep` of the
                                   # newest update it accepted from this learner (0 = none). A restarted
                                   # learner continues its data after the largest, and drops checkpointed
                                   # unsent work that an update of its previous incarnation already carried.
}

# learner -> syncer: one chunk of a fragment's pseudo-gradient after a round of inner steps.
struct FragmentUpdate {
  learnerId @0 :Text;     # sender learner.
  fragmentId @1 :UInt32;  # which parameter fragment this update is for.
  baseVersion @2 :UInt64; # global version the inner steps started from (for staleness).
  innerSteps @3 :UInt32;  # inner optimizer steps taken since `baseVersion`.
  tokens @4 :UInt64;      # tokens consumed in those steps (merge weight).
  trainLoss @5 :Float32;  # mean training loss over those steps (must be finite).
  chunk @6 :TensorChunk;  # the encoded pseudo-gradient, or one chunk of it.
  tokensPerSec @7 :Float64;  # the learner's throughput per compute second (0 = not measured yet; finite, >= 0).
  round @8 :UInt64;       # decoupled mode: the schedule slot of this fragment the update is due in,
                          # (step - offset) / H; the syncer counts an update towards the quorum of
                          # its open round only when it is not behind that round.
  fromStep @9 :UInt64;    # the learner's data position (inner step) when this work began: its previous
                          # update of the fragment, or the install it started from.
  toStep @10 :UInt64;     # its data position when it sent this update (>= fromStep). The syncer refuses
                          # an update that starts before the end of one it already accepted (a duplicate).
  computeSeconds @11 :Float64;  # the learner's compute time behind this update: each inner step's time
                                # times this fragment's share of the parameters (goodput ledger).
}

# syncer -> learners: one chunk of a committed global fragment.
struct GlobalFragment {
  fragmentId @0 :UInt32;  # which parameter fragment.
  version @1 :UInt64;     # committed global version of this fragment.
  chunk @2 :TensorChunk;  # the encoded parameters, or one chunk of them.
  fastestTokensPerSec @3 :Float64;  # async mode: the fastest active learner's throughput (0 = unknown);
                                    # a learner runs floor(H * its own / fastest) inner steps per period.
  deltaBase @4 :UInt64;   # 0: `chunk` holds the fragment's values, B <- chunk. Otherwise `chunk` holds
                          # Q(theta - B) against the broadcast state B of version `deltaBase`, and
                          # B <- B + chunk (float adds in element order, the same on every receiver);
                          # a receiver that does not hold version `deltaBase` fetches B from the store.
  uplinkCodecSet @5 :Bool;  # the syncer's broadcasts say which codec learners encode their updates
  uplinkCodec @6 :Codec;    # with from now on (the console's `set outer.codec`); the store's do not.
  schedule @7 :List(InnerStepsFrom);  # the syncer's: H from step 0, then each operator change (empty: unchanged).
}

# One epoch of the fragment schedule: H inner steps per fragment period after `fromStep` steps.
struct InnerStepsFrom {
  fromStep @0 :UInt64;
  innerSteps @1 :UInt32;
}

# learner -> failure monitor: liveness and throughput, every ~100-500 ms.
struct Heartbeat {
  learnerId @0 :Text;       # sender learner.
  step @1 :UInt64;          # inner steps taken since the learner started.
  tokensPerSec @2 :Float64; # recent throughput (must be finite, >= 0).
  nonfiniteRecoveries @3 :UInt64;  # this incarnation's steps that went NaN/Inf and were undone from the globals.
  # This incarnation's time so far, on the learner's clock (actors/accounting.hpp's ledger):
  incarnation @4 :UInt32;
  aliveSeconds @5 :Float64;     # since it started
  recoverySeconds @6 :Float64;  # start -> its first inner step (all of aliveSeconds before it)
  computeSeconds @7 :Float64;   # inner steps
  waitSeconds @8 :Float64;      # blocked on the syncer (sync mode)
  pausedSeconds @9 :Float64;    # paused by an operator
  paused @10 :Bool;             # paused now
  throttledSeconds @11 :Float64;  # inner steps slowed on purpose (a straggler, a throttle): not compute
  overheadSeconds @12 :Float64;   # its message handlers outside the times above
  # The fate of its compute (compute + restored = sent + unsent + dropped):
  sentComputeSeconds @13 :Float64;      # carried by the updates it sent
  unsentComputeSeconds @14 :Float64;    # in the unsent work it holds now
  droppedComputeSeconds @15 :Float64;   # unsent work dropped after a non-finite step
  restoredComputeSeconds @16 :Float64;  # an earlier incarnation's, restored from its checkpoint
  trainLoss @17 :Float64 = nan;  # its recent inner steps' cross-entropy (an exponential mean over ~10 steps); NaN before its first
}

# What a learner slot's supervisor knows of it.
enum SlotState {
  running @0;
  restarting @1;  # its incarnation died; the next one starts after the backoff
  finished @2;
  failed @3;      # restarted too often: given up
}

# learner supervisor -> failure monitor (through the node's session for a remote node), about one
# learner slot: its time summed over every incarnation this supervisor ran, measured on one clock.
# The monitor keeps the last report of each slot; the goodput ledger is built from them.
struct SlotReport {
  learnerId @0 :Text;
  state @1 :SlotState;
  incarnation @2 :UInt32;
  restarts @3 :UInt32;
  reporter @4 :UInt64;           # random per supervisor: a new node process starts its sums from zero
  lifetimeSeconds @5 :Float64;   # its incarnations' lives: spawn -> exit (or this report)
  aliveSeconds @6 :Float64;      # ... of which covered by their heartbeats
  recoverySeconds @7 :Float64;   # the heartbeats' times, summed
  computeSeconds @8 :Float64;
  waitSeconds @9 :Float64;
  pausedSeconds @10 :Float64;
  restartingSeconds @11 :Float64;  # exit -> respawn, summed (one in progress included)
  throttledSeconds @12 :Float64;   # the heartbeats' times, summed
  overheadSeconds @13 :Float64;
  sentComputeSeconds @14 :Float64;
  heldComputeSeconds @15 :Float64;  # the running incarnation's unsent work
  leftComputeSeconds @16 :Float64;  # ended incarnations' unsent work + dropped work - restored work
  idleSeconds @17 :Float64;         # no incarnation: before the first spawn, after the end
}

# What the coordinator may tell a node about one of its learners (an operator's console command).
enum ControlAction {
  killLearner @0;     # as abrupt as a crash; its supervisor restarts it
  restartLearner @1;  # saves its unsent work, exits; its supervisor restarts it
  pauseLearner @2;    # no inner steps until resumed (it keeps its heartbeats)
  resumeLearner @3;
  killNode @4;        # the node process kills itself (SIGKILL)
  throttleLearner @5; # every inner step takes `factor` x its compute time (1 = full speed again)
  corruptUpdate @6;   # recovery drills only: the learner's next update leaves with a flipped payload bit
                      # (its checksum unchanged, as a corruption the transport missed); a node refuses
                      # it unless started with --drill-hooks
}

# coordinator -> node (over the session it joined, with its session key).
struct LearnerControl {
  requestId @0 :UInt64;
  action @1 :ControlAction;
  learnerId @2 :Text;  # "" with killNode
  factor @3 :Float64;  # throttleLearner: 1 ..= 100
}

# What a Persist chunk carries.
enum PersistKind {
  parameters @0;     # the fragment's broadcast state B_p (what every learner holds; served to joiners).
  outerMomentum @1;  # the fragment's outer state: theta_p where it differs from B_p, the momentum and
                     # Delayed Nesterov's accumulator, as the manifest's `outer_state` entry lays out.
}

# syncer -> checkpoint store: one chunk of a version to make durable.
struct Persist {
  version @0 :UInt64;        # global version being committed.
  fragmentId @1 :UInt32;     # fragment this chunk belongs to.
  kind @2 :PersistKind;      # parameters or optimizer state.
  chunk @3 :TensorChunk;     # the encoded tensor, or one chunk of it.
  manifestJson @4 :Text;     # unused (the manifest travels in CommitEnd).
  ticket @5 :UInt64;         # a prepared commit's ticket (its version is chosen at its record); 0: none.
}

# checkpoint store -> syncer: a version is durable (committed) or failed to be.
struct Persisted {
  version @0 :UInt64;  # the version the store wrote.
  ok @1 :Bool;         # true: the version is committed and will never change.
  reason @2 :Text;     # why it failed (empty when ok).
  ticket @3 :UInt64;   # with version 0: ticket `ticket` is prepared (its blobs are durable, unrecorded).
}

enum LeaveCode {
  finished @0;  # its budget is spent and its last work handed off
  dead @1;      # monitor -> syncer / supervisor: declared dead by the failure detector
  stopped @2;   # it stopped before training (its node left first)
}

# learner -> syncer / monitor: orderly departure (crashes are detected, not announced).
struct Leave {
  learnerId @0 :Text;  # departing learner.
  reason @1 :Text;     # for people: "finished", "dead: heartbeat timeout", ...
  code @2 :LeaveCode;  # for control flow.
}

# learner -> checkpoint store: send the latest committed state (a joining learner's fetch). The store
# answers with a Welcome (version, fragments held) and the GlobalFragments the learner lacks.
struct Fetch {
  learnerId @0 :Text;
  heldDigests @1 :List(UInt64);  # XXH3-64 of the fp32 bytes of each fragment it holds (0 = none).
}

# syncer -> checkpoint store: send the latest committed version back as Persist chunks and a
# CommitEnd (a restarted syncer restoring its state).
struct Restore {
  requestId @0 :UInt64;
}

# The end of a version's Persist stream. syncer -> store: commit the chunks that arrived, with this
# manifest. store -> syncer: the restore stream is complete.
# A commit in two steps (fragments commit independently): the syncer streams a ticket's chunks and
# sends CommitEnd{version 0, ticket}: the store prepares them (writes the blobs) and answers
# Persisted{version 0, ticket}. Then CommitEnd{version V, ticket, manifest} records version V.
struct CommitEnd {
  version @0 :UInt64;
  manifestJson @1 :Text;
  ticket @2 :UInt64;
}

# console -> admin actor: one command (status, kill, restart, pause, resume, set, checkpoint, pin).
struct AdminRequest {
  requestId @0 :UInt64;   # echoed in the reply so the console can match answers.
  command @1 :Text;       # command name.
  args @2 :List(Text);    # command arguments, in order.
}

# admin actor -> console.
struct AdminReply {
  requestId @0 :UInt64;  # the request this answers.
  ok @1 :Bool;           # whether the command succeeded.
  text @2 :Text;         # human-readable answer or error.
  json @3 :Text;         # machine-readable answer (may be empty).
}

# What an operator may ask (archipelago console). Mutating verbs are audited before they act.
enum AdminVerb {
  status @0;      # run, mode, committed version, held-out loss, bytes up/down, uptime
  learners @1;    # every learner: state, step, tokens/s, deaths, node, site
  nodes @2;       # the admitted node sessions
  versions @3;    # the committed versions in the store
  pin @4;         # keep `version` through retention (mutating)
  unpin @5;       # let retention drop `version` again (mutating)
  audit @6;       # the newest entries of the audit log
  killSyncer @7;  # kill the syncer as abruptly as a crash; its supervisor restarts it (mutating)
  set @8;         # set the runtime-tunable `key` to `value`: outer.lr, outer.momentum, outer.quorum (mutating)
  drain @9;       # stop the run cleanly: nodes finish their in-flight work, the syncer commits it (mutating)
  killLearner @10;    # `target`: a learner id; as abrupt as a crash (mutating)
  killNode @11;       # `target`: a node name; its process is SIGKILLed (mutating)
  restartLearner @12; # `target`: a learner id (mutating)
  pause @13;          # `target`: a learner id, or "" for all (mutating)
  resume @14;         # `target`: a learner id, or "" for all (mutating)
  checkpoint @15;     # commit what is pending now, without waiting for quorum (mutating)
  events @16;         # the newest `count` failures, restarts, rejections and commands
  versionShow @17;    # one committed version's manifest: `version`
  throttle @18;       # `target`: a learner id, `value`: its slowdown factor (1 = full speed) (mutating)
  corruptUpdate @19;  # `target`: a learner id; recovery drills only (nodes started with --drill-hooks) (mutating)
}

# console -> admin actor (over an admin session, authenticated with the admin token); answered
# with an AdminReply. Typed: the verb is an enum and each argument has its own field.
struct AdminCommand {
  requestId @0 :UInt64;
  verb @1 :AdminVerb;
  version @2 :UInt64;  # pin, unpin
  count @3 :UInt32;    # audit: how many entries (0 = 20)
  key @4 :Text;        # set
  value @5 :Text;      # set
  target @6 :Text;     # kill, restart, pause, resume
}

struct Envelope {
  protocolVersion @0 :UInt32;  # kProtocolVersion of the sender; a mismatch is rejected (wrong_version).
  senderId @1 :Text;           # actor or learner id of the sender (for logs and counters).
  sequence @2 :UInt64;         # per-sender increasing number, to spot duplicates and replays.
  body :union {
    join @3 :Join;
    welcome @4 :Welcome;
    fragmentUpdate @5 :FragmentUpdate;
    globalFragment @6 :GlobalFragment;
    heartbeat @7 :Heartbeat;
    persist @8 :Persist;
    persisted @9 :Persisted;
    leave @10 :Leave;
    adminRequest @11 :AdminRequest;
    adminReply @12 :AdminReply;
    fetch @13 :Fetch;
    restore @14 :Restore;
    commitEnd @15 :CommitEnd;
    adminCommand @16 :AdminCommand;
    slotReport @17 :SlotReport;
    learnerControl @18 :LearnerControl;
  }
}
