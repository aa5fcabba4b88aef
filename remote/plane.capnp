# The cross-site plane: what a coordinator's port serves and what a node or a console may call.
#
# A peer that connects holds exactly one capability, the Gateway of its connection. Everything else
# it can reach it is handed by a Gateway call that proved a secret: a node's Session (bound to the
# learner slots it was admitted with) or a console's Admin. The coordinator, in turn, holds the
# NodeSink the node handed over with its join. Payloads are encoded messages::Envelope bytes
# (messages/archipelago.capnp); each Session method takes only the envelope kinds its name says,
# checked on arrival against actors/authorization.hpp. Nothing here carries a secret: a join or an
# admin session proves its token with an HMAC over a nonce of this connection (remote/proof.hpp).
@0xdc650c261b034ce4;

$import "/capnp/c++.capnp".namespace("archipelago::remote::wire");

interface Gateway {
  # A fresh 32-byte nonce for this connection; the next join or openAdmin must prove it. Each
  # nonce is good for one proof.
  challenge @0 () -> (nonce :Data);

  # Admits a node: `proof` is HMAC-SHA256(join token, "archipelago-join-v1" || nonce).
  join @1 (request :JoinRequest, sink :NodeSink) -> (answer :JoinAnswer, session :Session);

  # An operator's console session: `proof` is HMAC-SHA256(admin token, "archipelago-admin-v1" || nonce).
  openAdmin @2 (proof :Data) -> (accepted :Bool, reason :Text, admin :Admin);
}

struct JoinRequest {
  join @0 :Data;              # Envelope Join{node, site, device} (no token)
  learners @1 :Int32;         # learner slots asked for
  preferredFirst @2 :Int32;   # the first slot this node's running learners hold (-1: none)
  proof @3 :Data;
}

struct JoinAnswer {
  welcome @0 :Data;           # Envelope Welcome{accepted, refusal, reason}
  configToml @1 :Text;        # the run's configuration (training keys only are used by a node)
  topologyToml @2 :Text;
  coordinatorSite @3 :Text;
  firstLearner @4 :Int32;
  tokenizer @5 :Data;         # the run's SentencePiece model (empty: byte-level), to admitted nodes only
  shard @6 :Int32;            # this coordinator is syncer shard `shard` of `shards`: it owns fragment p
  shards @7 :Int32;           #   when p mod shards = shard (0 shards: an unsharded coordinator, 1)
}

# A node's session. `learner` is the node's handle of one learner incarnation (a small number the
# node chooses); the envelope's sender must be a learner of the session's admitted slots.
interface Session {
  join @0 (learner :UInt32, envelope :Data);             # Join to the syncer
  update @1 (learner :UInt32, envelope :Data) -> stream; # FragmentUpdate chunks to the syncer
  fetch @2 (learner :UInt32, envelope :Data);            # Fetch to the store
  heartbeat @3 (learner :UInt32, envelope :Data);        # Heartbeat to the monitor
  slotReport @4 (learner :UInt32, envelope :Data);       # SlotReport to the monitor
  leave @5 (learner :UInt32, toMonitor :Bool, envelope :Data);  # Leave to the syncer or the monitor
  learnerGone @6 (learner :UInt32, abnormal :Bool);      # that incarnation ended (crash: abnormal)
  ping @7 ();                                            # liveness of the link
}

enum Role {
  syncer @0;
  store @1;
  monitor @2;
}

# What the coordinator may call on a node: replies and broadcasts for its learners, an operator's
# learner control, and the end of the run.
interface NodeSink {
  deliver @0 (role :Role, learner :UInt32, envelope :Data) -> stream;
  control @1 (envelope :Data);   # Envelope LearnerControl
  stop @2 ();
}

interface Admin {
  request @0 (command :Data) -> (reply :Data);  # Envelope AdminCommand -> Envelope AdminReply
  ping @1 ();                                   # liveness of an idle console
}
