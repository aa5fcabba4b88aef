#include "actors/syncer.hpp"
#include "actors/directory.hpp"

#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <map>
#include <optional>

#include <unistd.h>

#include <caf/all.hpp>

#include "actors/accounting.hpp"
#include "actors/syncer_core.hpp"
#include "actors/wire.hpp"
#include "common/free_memory.hpp"
#include "messages/receiver.hpp"
#include "common/log.hpp"

namespace archipelago::actors {
namespace {

using namespace archipelago::messages;
using Clock = std::chrono::steady_clock;

constexpr auto kTick = std::chrono::milliseconds(50);
constexpr double kCommitTimeoutS = 30;
constexpr double kMaxResendPauseS = 30;  // a failed commit is sent again after 1, 2, 4, ... 30 s
// A commit's chunks go to the store in windows of 32 chunks (128 MiB), at most 2 windows unanswered:
// one is made while the store writes the other, and 256 MiB of chunks are in flight at most.
constexpr uint32_t kPersistWindowChunks = 32;
constexpr int kPersistWindows = 2;
constexpr double kRestoreRetryS = 3;

enum class Phase { restoring, initializing, ready };

// One tensor of a commit for the store: per fragment, B_p and the outer-state blob (its parts in
// the stored order), viewed in place in the staged value.
struct PersistTensor {
  int fragment = 0;
  PersistKind kind = PersistKind::parameters;
  std::vector<ByteView> parts;
  uint64_t count = 0;
};

struct SyncerState {
  SyncerSpec spec;
  std::unique_ptr<SyncerCore> core;
  Phase phase = Phase::restoring;
  Outbox outbox{"syncer"};
  // Learner updates (int8/int4 kept as their codes: folded from them) and the store's replay.
  Receiver receiver{ReceiveOptions{DecodeLimits{}, /*keep_quantized_updates=*/true, false}};
  std::vector<std::vector<float>> restore_broadcast, restore_outer;  // per fragment, from the store
  double restore_requested_s = -1;
  std::deque<std::pair<WireBytes, caf::actor>> deferred;  // arrived before the state was ready, with sender
  // Commits under way, by ticket: each is prepared by the store (its blobs written), then sealed and
  // recorded, one record at a time, in the order their blobs became durable (`to_record`).
  std::map<uint64_t, StagedCommit> commits;
  std::deque<uint64_t> to_record;
  uint64_t recording = 0;                  // the ticket whose record is in flight (0: none)
  // An operator's `checkpoint` waiting for its commit (by ticket): answered when it lands or fails.
  std::map<uint64_t, caf::typed_response_promise<bool, std::string, uint64_t>> checkpoints;
  uint64_t restored_version = 0;           // the version the last restore loaded (0: none)
  nlohmann::json restored_digests;         // broadcast_digests() right after that restore
  // Commits whose chunks are to go to the store, oldest first, a window at a time: the first one's
  // tensor and chunk next, and the windows sent that the store has not answered yet.
  std::deque<uint64_t> persist_queue;
  uint64_t persist_front_ticket = 0;          // whose tensors persist_front holds (tickets only grow)
  std::vector<PersistTensor> persist_front;  // made once per commit: its layout compares θ_p with B_p
  size_t persist_tensor = 0;
  uint32_t persist_chunk = 0;
  int persist_windows = 0;
  std::map<std::string, caf::actor> learner_handles;
  nlohmann::json ledger_carry;             // the failure monitor's latest (accounting.hpp, LedgerCarry)
  int64_t bytes_to_store = 0;
  Clock::time_point started = Clock::now();
  int64_t started_unix_ms = static_cast<int64_t>(unix_seconds() * 1000);  // names this syncer in the commit log
  std::shared_ptr<spdlog::logger> log = component_logger("syncer");
  const char* name = "syncer";

  double now() const { return monotonic_seconds(); }
};

using SyncerActor = caf::stateful_actor<SyncerState>;

caf::actor lookup(SyncerActor* self, caf::atom_value name) { return Directory::get(self->system(), name); }

// The spec's store, else the one registered as the process's store (a restarted store is found again).
caf::actor store_of(SyncerActor* self) {
  return self->state.spec.store ? self->state.spec.store : lookup(self, store_name());
}

void request_restore(SyncerActor* self) {
  auto& st = self->state;
  auto store = store_of(self);
  st.restore_requested_s = st.now();
  if (!store) return;  // retried on the next tick
  st.restore_broadcast.assign(st.core->fragment_count(), {});
  st.restore_outer.assign(st.core->fragment_count(), {});
  st.receiver.drop_persist();
  auto bytes = st.outbox.wrap(Restore{0});
  if (bytes) self->send(store, std::move(*bytes));
}

std::vector<PersistTensor> persist_tensors(const StagedCommit& commit) {
  std::vector<PersistTensor> tensors;
  auto add = [&](int fragment, PersistKind kind, const std::vector<const std::vector<float>*>& values) {
    PersistTensor t{fragment, kind, {}, 0};
    for (const auto* v : values) {
      t.parts.push_back(ByteView{reinterpret_cast<const uint8_t*>(v->data()), v->size() * sizeof(float), nullptr});
      t.count += v->size();
    }
    tensors.push_back(std::move(t));
  };
  for (const auto& staged : commit.fragments) {
    add(staged.fragment, PersistKind::parameters, {&staged.next.broadcast});  // what joining learners are served
    add(staged.fragment, PersistKind::outer_momentum, stored_outer_parts(staged.next));
  }
  return tensors;
}

// Sends windows of commits' chunks (kPersistWindowChunks each, read in place from the staged
// values: no copy of a whole blob), oldest commit first, each followed by a request that the store
// answers once it has taken them; an answer lets the next window go. So at most kPersistWindows
// windows of chunks are in flight, whatever the size of the model and however many commits are
// under way. A commit whose chunks are all sent is followed by its CommitEnd, which asks the store
// to prepare it.
void pump_persists(SyncerActor* self) {
  auto& st = self->state;
  while (st.persist_windows < kPersistWindows && !st.persist_queue.empty()) {
    auto store = store_of(self);
    if (!store) return;  // tried again at the next tick
    uint32_t sent = 0;
    while (!st.persist_queue.empty() && sent < kPersistWindowChunks) {
      const uint64_t ticket = st.persist_queue.front();
      auto it = st.commits.find(ticket);
      bool done = it == st.commits.end();  // failed or timed out meanwhile (then sent again under a new ticket)
      bool broken = false;
      if (!done) {
        if (st.persist_front_ticket != ticket) {
          st.persist_front = persist_tensors(it->second);
          st.persist_front_ticket = ticket;
        }
        const auto& tensors = st.persist_front;
        while (st.persist_tensor < tensors.size() && sent < kPersistWindowChunks) {
          const PersistTensor& t = tensors[st.persist_tensor];
          const uint32_t sent_before = sent;
          auto count = st.outbox.stream_tensor(
              Codec::fp32, t.count, t.parts,
              [&](TensorChunk chunk) -> Message {
                return Persist{0, static_cast<uint32_t>(t.fragment), t.kind, std::move(chunk), "", ticket};
              },
              [&](WireBytes&& m) {
                st.bytes_to_store += static_cast<int64_t>(m.size());
                self->send(store, std::move(m));
                ++sent;
              },
              st.persist_chunk, kPersistWindowChunks - sent);
          if (!count) {  // a bug: the commit is left to time out
            st.log->error("cannot persist fragment {} of ticket {}: {}", t.fragment, ticket, count.error().to_string());
            broken = true;
            break;
          }
          st.persist_chunk += sent - sent_before;
          if (st.persist_chunk >= *count) {  // this tensor is all sent
            ++st.persist_tensor;
            st.persist_chunk = 0;
          }
        }
        done = broken || st.persist_tensor >= tensors.size();
      }
      if (!done) break;  // the window is full
      st.persist_queue.pop_front();
      st.persist_tensor = 0;
      st.persist_chunk = 0;
      if (it == st.commits.end() || broken) continue;
      it->second.handed_s = st.now();
      auto end = st.outbox.wrap(CommitEnd{0, "", ticket});
      if (end) self->send(store, std::move(*end));
    }
    if (sent == 0) return;
    st.persist_windows += 1;
    auto answered = [=]() {
      self->state.persist_windows -= 1;
      pump_persists(self);
    };
    // No answer (a store that died or hangs) goes on after the commit timeout: the commits time out.
    self->request(store, std::chrono::seconds(static_cast<int>(kCommitTimeoutS)), taken_atom::value)
        .then(answered, [=](caf::error&) { answered(); });
  }
}

// Queues a staged commit's blobs for the store under its ticket.
void send_persist(SyncerActor* self, const StagedCommit& commit) {
  self->state.persist_queue.push_back(commit.ticket);
  pump_persists(self);
}

// Seals the oldest prepared commit (its version and manifest, from the state now) and asks the store
// to record it; one record at a time, so that each carries what the one before it committed.
void record_next(SyncerActor* self) {
  auto& st = self->state;
  while (st.recording == 0 && !st.to_record.empty()) {
    const uint64_t ticket = st.to_record.front();
    auto it = st.commits.find(ticket);
    if (it == st.commits.end()) {  // timed out meanwhile
      st.to_record.pop_front();
      continue;
    }
    auto store = store_of(self);
    if (!store) return;  // tried again at the next answer or timeout; past 30 s it is rolled back
    st.to_record.pop_front();
    StagedCommit& commit = it->second;
    st.core->seal(commit, st.now());
    // seal() wrote the byte counters; the goodput ledger's carry is the failure monitor's, kept here.
    if (!st.ledger_carry.is_null()) commit.manifest.accounting["ledger"] = st.ledger_carry;
    auto end = st.outbox.wrap(CommitEnd{commit.version, commit.manifest.encode(), ticket});
    if (!end) return;
    st.recording = ticket;
    self->send(store, std::move(*end));
  }
}

// Tells the store that ticket `ticket` is given up: what it prepared for it is dropped.
void abandon_ticket(SyncerActor* self, uint64_t ticket) {
  auto& st = self->state;
  auto store = store_of(self);
  auto abandon = st.outbox.wrap(Persisted{0, false, "given up", ticket});
  if (store && abandon) self->send(store, std::move(*abandon));
}

// Gives a commit up (the store failed it, or did not answer): its contributions stay pending. When
// it was the initial parameters', the syncer goes back to restoring (the store may hold a version now).
void fail_commit(SyncerActor* self, uint64_t ticket, const std::string& reason) {
  auto& st = self->state;
  auto it = st.commits.find(ticket);
  if (it == st.commits.end()) return;
  StagedCommit commit = std::move(it->second);
  st.commits.erase(it);
  if (st.recording == ticket) st.recording = 0;
  if (auto promise = st.checkpoints.find(ticket); promise != st.checkpoints.end()) {
    promise->second.deliver(false, "the commit failed: " + reason, uint64_t{0});
    st.checkpoints.erase(promise);
  }
  st.core->commit_failed(commit, reason);
  if (commit.initial) {
    st.phase = Phase::restoring;
    request_restore(self);
    return;
  }
  // Still staged, under a new ticket: sent again after a pause that doubles with each failure.
  commit.resend_at_s = st.now() + std::min(kMaxResendPauseS, std::pow(2.0, commit.attempts - 1));
  st.commits.emplace(commit.ticket, std::move(commit));
}

// Stages `fragments` and sends the commit on its way; its ticket, or 0 when nothing was staged.
uint64_t start_commit(SyncerActor* self, const std::vector<int>& fragments, std::string* error = nullptr) {
  auto& st = self->state;
  auto staged = st.core->stage(fragments, st.now());
  if (!staged) {
    // A non-finite merge was logged (once) and dropped by the core; anything else is logged here.
    if (staged.error().code != ErrorCode::non_finite) st.log->error("merge failed: {}", staged.error().to_string());
    if (error) *error = staged.error().to_string();
    return 0;
  }
  const uint64_t ticket = staged->ticket;
  if (st.log->should_log(spdlog::level::debug)) {
    st.log->debug("staged fragments {} as commit ticket {}", nlohmann::json(staged->fragment_ids()).dump(), ticket);
  }
  auto& commit = st.commits.emplace(ticket, std::move(*staged)).first->second;
  send_persist(self, commit);
  return ticket;
}

void broadcast(SyncerActor* self, const StagedCommit& commit) {
  auto& st = self->state;
  std::vector<caf::actor> recipients;
  int learners = 0;
  for (const auto& [id, handle] : st.learner_handles) {
    auto it = st.core->learners().find(id);
    if (it != st.core->learners().end() && it->second.active && handle) {
      recipients.push_back(handle);
      ++learners;
    }
  }
  if (auto evaluator = lookup(self, evaluator_name())) recipients.push_back(evaluator);
  const double fastest = st.core->fastest_tokens_per_s();
  for (const auto& staged : commit.fragments) {
    const auto& downlink = staged.downlink;
    const uint64_t count = static_cast<uint64_t>(st.core->fragment_numel(staged.fragment));
    auto messages = st.outbox.wrap_tensor(downlink.codec, count, downlink.payload, [&](TensorChunk chunk) -> Message {
      GlobalFragment global{static_cast<uint32_t>(staged.fragment), commit.version, std::move(chunk), fastest};
      global.delta_base = downlink.delta_base;
      global.uplink_codec = st.core->uplink_codec();
      global.schedule = st.core->schedule_to_broadcast();
      return global;
    });
    if (!messages) {
      st.log->error("cannot broadcast fragment {} of version {}: {}", staged.fragment, commit.version,
                    messages.error().to_string());
      continue;
    }
    for (auto& m : *messages) {
      st.core->bytes_to_learners += static_cast<int64_t>(m.size()) * learners;
      // One buffer for every recipient (a CAF message is shared, copied only by a receiver that
      // changes it): M learners of one process do not make M copies of a broadcast at once.
      const caf::message shared = caf::make_message(std::move(m));
      for (const auto& r : recipients) self->send(r, shared);
    }
  }
}

// Stages every fragment whose merge is due and has no commit in flight: fragments commit
// independently, so one slow commit never holds back another fragment's rounds.
void try_merge(SyncerActor* self) {
  auto& st = self->state;
  if (st.phase != Phase::ready) return;
  double deadline = -1;
  auto ready = st.core->ready_fragments(st.now(), &deadline);
  if (ready.empty()) return;
  give_back_free_memory();  // the round's freed chunks, before staging makes this syncer's peak
  start_commit(self, ready);
}

void finish_restore(SyncerActor* self, const CommitEnd& marker) {
  auto& st = self->state;
  auto decoded = diloco::VersionManifest::decode(marker.manifest_json);
  if (!decoded) {
    // The store took it as JSON when it was committed: restore its blobs, with the manifest's defaults.
    st.log->warn("version {}: {}; restoring its blobs without it", marker.version, decoded.error().to_string());
  }
  const diloco::VersionManifest manifest = decoded ? std::move(*decoded) : diloco::VersionManifest{};
  Status restored = st.core->restore(marker.version, std::move(st.restore_broadcast), std::move(st.restore_outer),
                                     manifest);
  if (!restored) {
    st.log->error("cannot restore version {}: {}; retrying", marker.version, restored.error().to_string());
    request_restore(self);
    return;
  }
  if (st.ledger_carry.is_null() && manifest.accounting.contains("ledger")) {
    st.ledger_carry = manifest.accounting["ledger"];  // until the monitor's next, kept as committed
  }
  st.spec.initial_fragments->release();  // every later start restores from the store
  st.log->info("restored committed version {} from the checkpoint store", marker.version);
  st.restored_version = marker.version;
  st.restored_digests = st.core->broadcast_digests();
  st.phase = Phase::ready;
}

// The commit log's line for a version the store said is durable (actors/syncer.hpp).
void log_commit(SyncerState& st, uint64_t version) {
  const std::string& dir = st.spec.options->run_dir;
  if (dir.empty()) return;
  std::ofstream out(dir + "/" + kCommitLogFile, std::ios::app);
  out << nlohmann::json{{"version", version}, {"pid", static_cast<int64_t>(getpid())},
                        {"syncer_started_unix_ms", st.started_unix_ms}}.dump()
      << "\n";
  if (!out) st.log->warn("cannot append committed version {} to {}/{}", version, dir, kCommitLogFile);
}

void on_persisted(SyncerActor* self, const Persisted& persisted) {
  auto& st = self->state;
  if (st.phase == Phase::restoring) {
    if (persisted.ticket != 0) return;  // a late answer about a commit made before a restore
    // Nothing stored yet: commit version 1 (the initial parameters).
    if (!st.core->has_values()) {
      auto theta0 = st.spec.initial_fragments->copy();
      Status held = theta0 ? st.core->hold_initial(std::move(*theta0)) : Status(theta0.error());
      if (!held) {
        // θ0 goes only once a version is durable: a store that lost its versions. Asked again at
        // each restore retry, in case another store answers.
        st.log->error("the store holds no committed version ({}), and the initial parameters cannot be "
                      "committed: {}", persisted.reason, held.error().reason);
        return;
      }
    }
    st.log->info("no committed version in the store ({}): committing the initial parameters", persisted.reason);
    st.phase = Phase::initializing;
    StagedCommit initial = st.core->stage_initial(st.now());
    const uint64_t ticket = initial.ticket;
    send_persist(self, st.commits.emplace(ticket, std::move(initial)).first->second);
    return;
  }
  auto it = st.commits.find(persisted.ticket);
  if (it == st.commits.end() || (persisted.version != 0 && st.recording != persisted.ticket)) {
    // A late answer to a commit given up: the store drops what it prepared for it.
    if (persisted.version == 0 && persisted.ok) abandon_ticket(self, persisted.ticket);
    return;
  }
  if (!persisted.ok) {
    fail_commit(self, persisted.ticket, persisted.reason);
    record_next(self);
    return;
  }
  if (persisted.version == 0) {  // its blobs are durable: it may be recorded
    st.to_record.push_back(persisted.ticket);
    record_next(self);
    return;
  }
  StagedCommit commit = std::move(it->second);
  st.commits.erase(it);
  st.recording = 0;
  st.core->commit_succeeded(commit, st.now());
  log_commit(st, commit.version);
  st.spec.initial_fragments->release();  // every later start restores from the store
  if (commit.initial) {
    st.phase = Phase::ready;
    st.log->info("committed version {} (initial parameters)", commit.version);
  } else {
    broadcast(self, commit);
  }
  if (auto promise = st.checkpoints.find(commit.ticket); promise != st.checkpoints.end()) {
    promise->second.deliver(true, std::string("committed"), commit.version);
    st.checkpoints.erase(promise);
  }
  record_next(self);
}

// What the syncer does with each message its mailbox brings (messages::Handler): a learner's
// update is screened chunk by chunk before anything is buffered, the store's replay is taken only
// while restoring, and until the syncer is ready every other kind is held back and dispatched again
// once it is (replay_held).
struct SyncerHandler : messages::Handler {
  using messages::Handler::on;
  SyncerActor* self;
  caf::actor sender;  // of the message being dispatched
  int64_t size = 0;   // its bytes

  SyncerHandler(SyncerActor* self, caf::actor sender, int64_t size) : self(self), sender(std::move(sender)), size(size) {}

  SyncerState& st() { return self->state; }

  bool hold(const Message& body) override {
    const bool restore_stream = std::holds_alternative<Persist>(body) || std::holds_alternative<CommitEnd>(body) ||
                                std::holds_alternative<Persisted>(body);
    return !restore_stream;
  }
  void held(WireBytes&& bytes) override { st().deferred.emplace_back(std::move(bytes), sender); }

  bool screen(const DecodedEnvelope& envelope, const TensorChunk&) override {
    if (const auto* update = std::get_if<FragmentUpdate>(&envelope.body)) return screen_update(envelope, *update);
    const auto* replay = std::get_if<Persist>(&envelope.body);
    return replay && st().phase == Phase::restoring &&
           replay->fragment_id < static_cast<uint32_t>(st().core->fragment_count());
  }

  // A chunk of a learner's update, before it is buffered: counted, and refused here (with the
  // reason counted) when the syncer would not take the update it belongs to.
  bool screen_update(const DecodedEnvelope& envelope, const FragmentUpdate& update) {
    auto& s = st();
    s.core->bytes_from_learners += size;
    // A refused update's compute counts once (its first chunk), as rejected work.
    const double compute_s = update.chunk.chunk_index == 0 ? update.compute_seconds : 0;
    if (auto reject = s.core->screen(envelope.sender_id, envelope.sequence, update)) {
      s.core->count_reject(*reject, update.learner_id, 0, compute_s);
      s.log->warn("rejected a fragment update from {} (fragment {}): {}", update.learner_id, update.fragment_id,
                  to_string(*reject));
      if (*reject == RejectReason::unknown_learner) {
        // Tell it to join (again): e.g. it was declared dead while it was only slow.
        Welcome again{s.core->latest_version(), 0, false, "not joined: send Join first"};
        again.refusal = JoinRefusal::unknown_learner;
        auto bytes = s.outbox.wrap(again);
        if (sender && bytes) self->send(sender, std::move(*bytes));
      }
      return false;
    }
    if (update.chunk.chunk_index == 0) {
      s.core->updates_by_codec[codec_name(update.chunk.codec)] += 1;
      s.core->updates_by_period[std::to_string(update.inner_steps)] += 1;
    }
    return true;
  }

  // Bytes that are no envelope, or an update chunk the receiver refused (inconsistent, corrupt,
  // non-finite, ...): the update is rejected, its reason counted.
  void refused(const DecodedEnvelope* envelope, const Error& error) override {
    auto& s = st();
    const auto* update = envelope ? std::get_if<FragmentUpdate>(&envelope->body) : nullptr;
    if (!update) {
      if (envelope) return;  // a replay chunk of the store: the restore fails at its end
      s.core->count_reject(reject_reason_of(error), "");
      s.log->warn("rejected a message: {}", error.to_string());
      return;
    }
    const double compute_s = update->chunk.chunk_index == 0 ? update->compute_seconds : 0;
    s.core->count_reject(reject_reason_of(error), update->learner_id, 0, compute_s);
    s.log->warn("rejected an update from {}: {}", update->learner_id, error.to_string());
  }

  void on(const DecodedEnvelope&, const Join& join) override {
    auto& s = st();
    auto welcome = s.core->join(join, s.now());
    if (welcome.accepted) {
      s.learner_handles[join.learner_id] = sender;
      s.log->info("{} joined at version {}", join.learner_id, welcome.version);
    } else {
      s.log->warn("refused {}: {}", join.learner_id, welcome.reason);
    }
    auto reply = s.outbox.wrap(welcome);
    if (reply && sender) self->send(sender, std::move(*reply));
  }

  // A learner's whole update (its tensor as it came: int8/int4 as its codes, folded from them).
  void on(const DecodedEnvelope&, const FragmentUpdate& update, ReceivedTensor&& tensor) override {
    auto& s = st();
    UpdateHeader header{update.learner_id, update.fragment_id, update.base_version, update.inner_steps, update.tokens,
                        update.train_loss, update.round, update.from_step, update.to_step, update.compute_seconds};
    SyncerCore::Payload payload{tensor.codec, std::move(tensor.encoded), std::move(tensor.values)};
    if (s.core->accept(header, std::move(payload), s.now())) return;
    try_merge(self);
  }

  void on(const DecodedEnvelope&, const Leave& leave) override {
    st().core->leave(leave.learner_id, leave.code == LeaveCode::finished, leave.reason, st().now());
    try_merge(self);
  }

  void on(const DecodedEnvelope&, const Persisted& persisted) override {
    on_persisted(self, persisted);
    try_merge(self);
  }

  // A tensor of the store's replay (only taken while restoring: see screen).
  void on(const DecodedEnvelope&, const Persist& replay, ReceivedTensor&& tensor) override {
    const bool params = replay.kind == PersistKind::parameters;
    (params ? st().restore_broadcast : st().restore_outer)[replay.fragment_id] = std::move(tensor.values);
  }

  void on(const DecodedEnvelope&, const CommitEnd& end) override {
    if (st().phase == Phase::restoring) finish_restore(self, end);
  }

  void ignored(const DecodedEnvelope& envelope) override {
    st().log->warn("ignored a {} message from {}", message_name(envelope.body), envelope.sender_id);
  }
};

// What was held back while the syncer was not ready, dispatched now that it is.
void replay_held(SyncerActor* self) {
  auto& st = self->state;
  if (st.phase != Phase::ready || st.deferred.empty()) return;
  auto deferred = std::move(st.deferred);
  st.deferred.clear();
  for (auto& [bytes, from] : deferred) {
    SyncerHandler handler{self, from, static_cast<int64_t>(bytes.size())};
    st.receiver.dispatch(std::move(bytes), handler);
  }
}

caf::behavior syncer_behavior(SyncerActor* self, SyncerSpec spec) {
  auto& st = self->state;
  st.spec = spec;
  st.core = std::make_unique<SyncerCore>(SyncerCore::without_values(*spec.options, spec.initial_fragments->numels()));
  request_restore(self);
  self->send(self, tick_atom::value);
  return {
      [=](WireBytes& bytes) {
        SyncerHandler handler{self, caf::actor_cast<caf::actor>(self->current_sender()),
                              static_cast<int64_t>(bytes.size())};
        self->state.receiver.dispatch(std::move(bytes), handler, /*holding=*/self->state.phase != Phase::ready);
        replay_held(self);
      },
      [=](ledger_atom, const std::string& carry) {
        auto j = nlohmann::json::parse(carry, nullptr, false);
        if (j.is_object()) self->state.ledger_carry = std::move(j);
      },
      [=](tune_atom, const std::string& key, const std::string& value) -> std::tuple<bool, std::string, std::string> {
        auto& st = self->state;
        auto change = st.core->set(key, value);
        if (!change) return {false, change.error().reason, ""};
        st.log->info("{}: {} -> {} (admin set)", key, change->first, change->second);
        return {true, change->first, change->second};
      },
      [=](checkpoint_atom) -> caf::result<bool, std::string, uint64_t> {
        // An operator's `checkpoint`: what is pending is merged and committed now, quorum or not;
        // answered once that version is committed (its number is chosen when it lands).
        auto& st = self->state;
        if (st.phase != Phase::ready) return {false, "the syncer is restoring its state", uint64_t{0}};
        auto pending = st.core->fragments_with_pending();
        std::vector<int> free;
        for (int p : pending) {
          if (!st.core->fragment_in_flight(p)) free.push_back(p);
        }
        if (pending.empty()) {
          return {true, "nothing pending: the latest version is committed", st.core->latest_version()};
        }
        if (free.empty()) return {false, "a commit of every pending fragment is in flight: try again", uint64_t{0}};
        std::string error;
        const uint64_t ticket = start_commit(self, free, &error);
        if (ticket == 0) return {false, error, uint64_t{0}};
        st.log->info("checkpoint (admin): committing {} fragment(s) as ticket {}", free.size(), ticket);
        auto promise = self->make_response_promise<bool, std::string, uint64_t>();
        st.checkpoints.emplace(ticket, promise);
        return promise;
      },
      [=](tick_atom) {
        auto& st = self->state;
        if (st.phase == Phase::restoring && st.now() - st.restore_requested_s > kRestoreRetryS) request_restore(self);
        std::vector<uint64_t> overdue;
        for (auto& [ticket, commit] : st.commits) {
          if (commit.resend_at_s >= 0) {
            if (st.now() < commit.resend_at_s) continue;
            commit.resend_at_s = -1;
            commit.handed_s = -1;
            send_persist(self, commit);
          } else if (commit.handed_s >= 0 && st.now() - commit.handed_s > kCommitTimeoutS) {
            overdue.push_back(ticket);
          }
        }
        pump_persists(self);  // after a store was missing, or windows that were never answered
        for (uint64_t ticket : overdue) {
          abandon_ticket(self, ticket);
          fail_commit(self, ticket, "the checkpoint store did not answer");
        }
        if (!overdue.empty()) record_next(self);
        try_merge(self);
        self->delayed_send(self, kTick, tick_atom::value);
      },
      [=](admin_atom, WireBytes& bytes) -> WireBytes {
        auto& st = self->state;
        auto request = read_admin_request(std::move(bytes));
        if (request && request->command == "digests") {
          return admin_reply("syncer", request->request_id, true, "ok",
                             {{"fragments", st.core->broadcast_digests()}, {"version", st.core->latest_version()},
                              {"restored_version", st.restored_version}, {"restored_fragments", st.restored_digests}});
        }
        auto status = st.core->status(st.now());
        status.phase = st.phase == Phase::ready ? "ready" : st.phase == Phase::restoring ? "restoring" : "initializing";
        status.bytes_to_store = st.bytes_to_store;
        status.deferred = static_cast<int64_t>(st.deferred.size());
        // θ0 goes once the store holds a version (every later start restores from it).
        status.initial_parameters = st.spec.initial_fragments->released() ? "released" : "held";
        return admin_reply("syncer", request ? request->request_id : 0, true, "ok", status);
      },
  };
}

}  // namespace

caf::actor spawn_syncer(caf::actor_system& system, SyncerSpec spec) {
  return system.spawn(syncer_behavior, std::move(spec));
}

}  // namespace archipelago::actors
