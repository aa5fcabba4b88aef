#include "actors/store_actor.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include <caf/all.hpp>

#include "actors/status.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "diloco/version_manifest.hpp"
#include "messages/receiver.hpp"
#include "storage/commit_tickets.hpp"

namespace archipelago::actors {
namespace {

using namespace archipelago::messages;

// Where a prepare worker leaves its result for the store actor (the worker may outlive the actor).
struct PrepareResults {
  std::mutex mutex;
  std::map<uint64_t, Expected<storage::CheckpointStore::PreparedCommit>> done;
};

struct StoreState {
  std::shared_ptr<storage::CheckpointStore> store;
  ShardOptions shard;  // a learner is served only these fragments
  Outbox outbox{"store"};
  Receiver receiver{ReceiveOptions{DecodeLimits{}, false, /*place_persist=*/true}};
  std::optional<storage::CommitTickets> tickets;  // the commits under way, by ticket (on the store)
  std::map<uint64_t, caf::actor> ticket_senders;
  std::shared_ptr<PrepareResults> prepare_results = std::make_shared<PrepareResults>();
  int64_t commits = 0;
  int64_t failed_commits = 0;
  int64_t bytes_received = 0;  // from the syncer
  int64_t bytes_served = 0;    // state sent to joining learners and restoring syncers
  int64_t bytes_served_learners = 0;  // of which to learners (a link in a multi-site run)
  int64_t fragments_held = 0;  // fragments a requester already held (digest matched): not sent
  int64_t serves = 0;
  std::shared_ptr<spdlog::logger> log = component_logger("store");
  const char* name = "checkpoint_store";
};

using StoreActor = caf::stateful_actor<StoreState>;

void send_bytes(StoreActor* self, const caf::actor& to, WireBytes bytes, bool to_learner = false) {
  self->state.bytes_served += static_cast<int64_t>(bytes.size());
  if (to_learner) self->state.bytes_served_learners += static_cast<int64_t>(bytes.size());
  self->send(to, std::move(bytes));
}

void reply_persisted(StoreActor* self, const caf::actor& to, uint64_t version, bool ok, const std::string& reason,
                     uint64_t ticket = 0) {
  auto bytes = self->state.outbox.wrap(Persisted{version, ok, reason, ticket});
  if (bytes) self->send(to, std::move(*bytes));
}

// Whether a Persist chunk is taken at all: it names a ticket whose chunks have not ended.
bool takes_chunk(StoreActor* self, const Persist& persist) {
  auto& st = self->state;
  if (persist.ticket == 0) {  // every commit is made under a ticket (archipelago.capnp, CommitEnd)
    st.log->warn("ignored a chunk of fragment {} without a commit ticket", persist.fragment_id);
    return false;
  }
  return st.tickets->takes_pieces(persist.ticket);  // a chunk after its ticket's end: ignored
}

// A chunk placed in its tensor (messages::Receiver checked it): written straight into the tensor's file.
void on_persist(StoreActor* self, const Persist& persist, const ChunkPlacement& placement) {
  auto& st = self->state;
  const auto role = persist.kind == PersistKind::parameters ? storage::BlobRole::parameters
                                                            : storage::BlobRole::optimizer_state;
  Status written = st.tickets->add_piece({persist.ticket, persist.fragment_id, role, persist.chunk.total_bytes,
                                          placement.offset, persist.chunk.payload.data, placement.size});
  if (!written.ok()) {
    // The tensor stays incomplete (its chunks are not resent), so the ticket fails at its end.
    st.log->error("ticket {}: cannot write fragment {}: {}", persist.ticket, persist.fragment_id,
                  written.error().to_string());
  }
}

// A ticket's chunks are all here: its blobs are prepared by a worker of their own (a slow write of one
// fragment never holds back another's commit, nor the store's serving), which reports back.
void prepare_ticket(StoreActor* self, const caf::actor& sender, uint64_t ticket) {
  auto& st = self->state;
  auto commit = st.tickets->begin_prepare(ticket);
  if (!commit) {
    if (commit.error().code == ErrorCode::truncated) st.failed_commits += 1;
    reply_persisted(self, sender, 0, false, commit.error().reason, ticket);
    return;
  }
  st.ticket_senders[ticket] = sender;
  auto data = std::make_shared<storage::CheckpointStore::IncomingCommit>(std::move(*commit));
  auto store = st.store;
  auto results = st.prepare_results;
  caf::actor owner = caf::actor_cast<caf::actor>(self);
  self->spawn<caf::detached>([=](caf::blocking_actor* worker) {
    auto prepared = storage::CommitTickets::prepare(*store, std::move(*data), ticket);
    {
      std::lock_guard<std::mutex> lock(results->mutex);
      results->done.emplace(ticket, std::move(prepared));
    }
    worker->send(owner, prepared_atom::value, ticket);
  });
}

void on_prepared(StoreActor* self, uint64_t ticket) {
  auto& st = self->state;
  std::optional<Expected<storage::CheckpointStore::PreparedCommit>> result;
  {
    std::lock_guard<std::mutex> lock(st.prepare_results->mutex);
    auto done = st.prepare_results->done.find(ticket);
    if (done == st.prepare_results->done.end()) return;
    result.emplace(std::move(done->second));
    st.prepare_results->done.erase(done);
  }
  caf::actor sender = st.ticket_senders[ticket];
  st.ticket_senders.erase(ticket);
  auto prepared = st.tickets->finish_prepare(ticket, std::move(*result));
  if (!prepared) {
    st.failed_commits += 1;
    const std::string reason = prepared.error().to_string();
    st.log->error("preparing commit ticket {} failed: {}", ticket, reason);
    reply_persisted(self, sender, 0, false, reason, ticket);
    return;
  }
  if (*prepared == storage::CommitTickets::Prepared::prepared) reply_persisted(self, sender, 0, true, "", ticket);
}

// Drops a ticket the syncer gave up, with the chunks of it still arriving.
void drop_ticket(StoreActor* self, uint64_t ticket) {
  self->state.tickets->drop(ticket);
  self->state.receiver.drop_persist(ticket);
}

// Records a prepared ticket as `end.version`, carrying the fragments its manifest names.
void record_ticket(StoreActor* self, const caf::actor& sender, const CommitEnd& end,
                   const diloco::VersionManifest& manifest) {
  auto& st = self->state;
  if (!st.tickets->is_prepared(end.ticket)) {
    st.failed_commits += 1;
    reply_persisted(self, sender, end.version, false, "ticket " + std::to_string(end.ticket) + " is not prepared",
                    end.ticket);
    return;
  }
  std::vector<uint32_t> carried(manifest.carried.begin(), manifest.carried.end());
  auto stats = st.tickets->record(end.ticket, end.version, end.manifest_json, std::move(carried));
  if (!stats) {
    st.failed_commits += 1;
    st.log->error("commit of version {} failed: {}", end.version, stats.error().to_string());
    reply_persisted(self, sender, end.version, false, stats.error().to_string(), end.ticket);
    return;
  }
  st.commits += 1;
  reply_persisted(self, sender, end.version, true, "", end.ticket);
}

// The end of a ticket's chunks (version 0: prepare them) or its record (as that version).
void on_commit_end(StoreActor* self, const caf::actor& sender, const CommitEnd& persist) {
  auto& st = self->state;
  if (persist.ticket == 0) {
    st.failed_commits += 1;
    reply_persisted(self, sender, persist.version, false, "a commit needs a ticket");
    return;
  }
  if (persist.version == 0) {
    prepare_ticket(self, sender, persist.ticket);
    return;
  }
  auto manifest = diloco::VersionManifest::decode(persist.manifest_json);
  if (!manifest) {
    drop_ticket(self, persist.ticket);
    st.failed_commits += 1;
    reply_persisted(self, sender, persist.version, false, manifest.error().reason, persist.ticket);
    return;
  }
  record_ticket(self, sender, persist, *manifest);
}

// Sends a stored version as GlobalFragments (to a learner or the evaluator), each labelled with the
// version it last changed at, or as Persist chunks (to the syncer). `held`: digests of what the
// requester holds per fragment; a fragment whose stored bytes have that digest is not sent.
void serve_latest(StoreActor* self, const caf::actor& to, bool as_persist, const std::string& requester = "",
                  const std::vector<uint64_t>& held = {}) {
  auto& st = self->state;
  auto latest = st.store->latest_committed();
  if (!latest) {
    if (as_persist) {
      reply_persisted(self, to, 0, false, "no committed version: " + latest.error().reason);
    } else {
      Welcome none{0, 0, false, "no committed version yet"};
      none.refusal = JoinRefusal::no_committed_version;
      auto bytes = st.outbox.wrap(none);
      if (bytes) send_bytes(self, to, std::move(*bytes));
    }
    return;
  }
  st.serves += 1;
  const uint64_t version = latest->version;
  const bool to_learner = learner_index(requester) >= 0;
  // A manifest that does not read (none is committed unread) labels every fragment with the version.
  auto manifest = diloco::VersionManifest::decode(latest->manifest_json);
  auto version_of = [&](uint32_t fragment) {
    return manifest && fragment < manifest->fragment_versions.size() ? manifest->fragment_versions[fragment] : version;
  };
  std::set<uint32_t> skip;
  if (!as_persist) {
    Welcome welcome{version, static_cast<uint32_t>(latest->fragments.size()), true, ""};
    for (const auto& [fragment, blob] : latest->fragments) {
      welcome.fragment_versions.push_back(version_of(fragment));
      if (!st.shard.owns(static_cast<int>(fragment))) {
        skip.insert(fragment);  // another shard's: its owner serves it
        continue;
      }
      if (fragment < held.size() && held[fragment] == chunk_checksum(blob.data(), blob.size())) {
        welcome.held_fragments.push_back(fragment);
        skip.insert(fragment);
      }
    }
    st.fragments_held += static_cast<int64_t>(skip.size());
    auto bytes = st.outbox.wrap(welcome);
    if (bytes) send_bytes(self, to, std::move(*bytes), to_learner);
  }
  auto send_tensor = [&](uint32_t fragment, const storage::Blob& blob, PersistKind kind) {
    const uint64_t count = blob.size() / sizeof(float);
    auto messages = st.outbox.wrap_tensor(Codec::fp32, count, blob, [&](TensorChunk chunk) -> Message {
      if (as_persist) return Persist{version, fragment, kind, std::move(chunk), ""};
      return GlobalFragment{fragment, version_of(fragment), std::move(chunk)};
    });
    if (!messages) {
      st.log->error("cannot serve fragment {} of version {}: {}", fragment, version, messages.error().to_string());
      return;
    }
    for (auto& m : *messages) send_bytes(self, to, std::move(m), to_learner);
  };
  for (const auto& [fragment, blob] : latest->fragments) {
    if (skip.count(fragment)) continue;
    send_tensor(fragment, blob, PersistKind::parameters);
    if (as_persist) {
      auto it = latest->optimizer_state.find(fragment);
      if (it != latest->optimizer_state.end()) send_tensor(fragment, it->second, PersistKind::outer_momentum);
    }
  }
  if (as_persist) {
    auto end = st.outbox.wrap(CommitEnd{version, latest->manifest_json.empty() ? "{}" : latest->manifest_json});
    if (end) send_bytes(self, to, std::move(*end));
  }
}

// What the store does with each message its mailbox brings (messages::Handler): a commit's Persist
// chunks are placed (checked, then written straight into their tensor's file), its CommitEnd
// prepares or records it, a Fetch or a Restore is served the latest version.
struct StoreHandler : messages::Handler {
  using messages::Handler::on;
  StoreActor* self;
  caf::actor sender;  // of the message being dispatched

  StoreHandler(StoreActor* self, caf::actor sender) : self(self), sender(std::move(sender)) {}

  bool screen(const DecodedEnvelope& envelope, const TensorChunk&) override {
    const auto* persist = std::get_if<Persist>(&envelope.body);
    return persist && takes_chunk(self, *persist);  // the store takes no other tensor
  }

  void refused(const DecodedEnvelope* envelope, const Error& error) override {
    auto& st = self->state;
    const auto* persist = envelope ? std::get_if<Persist>(&envelope->body) : nullptr;
    if (!persist) {
      if (!envelope) st.log->warn("dropped a malformed message: {}", error.to_string());
      return;
    }
    st.log->warn("version {} (ticket {}): bad chunk for fragment {}: {}", persist->version, persist->ticket,
                 persist->fragment_id, error.to_string());
    st.tickets->lose_piece(persist->ticket);  // its commit cannot be whole: it fails, counted, at its end
  }

  void placed(const DecodedEnvelope&, const Persist& persist, const ChunkPlacement& placement) override {
    on_persist(self, persist, placement);
  }

  void on(const DecodedEnvelope&, const CommitEnd& end) override { on_commit_end(self, sender, end); }

  // syncer -> store: it gave ticket `ticket` up (timed out); its prepared blobs are dropped.
  void on(const DecodedEnvelope& envelope, const Persisted& abandon) override {
    if (abandon.ok) ignored(envelope);
    else drop_ticket(self, abandon.ticket);
  }

  void on(const DecodedEnvelope&, const Fetch& fetch) override {
    serve_latest(self, sender, false, fetch.learner_id, fetch.held_digests);
  }

  // A syncer that restores has no commit under way: what an earlier incarnation left (chunks,
  // prepared blobs, staged files) is dropped, and its tickets may be reused.
  void on(const DecodedEnvelope&, const Restore&) override {
    self->state.tickets->drop_all();
    self->state.receiver.drop_persist();
    serve_latest(self, sender, true);
  }

  void ignored(const DecodedEnvelope& envelope) override {
    self->state.log->warn("ignored a {} message", message_name(envelope.body));
  }
};

caf::behavior store_behavior(StoreActor* self, std::shared_ptr<storage::CheckpointStore> store, ShardOptions shard) {
  self->state.store = std::move(store);
  self->state.shard = shard;
  self->state.tickets.emplace(self->state.store);
  return {
      [=](WireBytes& bytes) {
        self->state.bytes_received += static_cast<int64_t>(bytes.size());
        StoreHandler handler{self, caf::actor_cast<caf::actor>(self->current_sender())};
        self->state.receiver.dispatch(std::move(bytes), handler);
      },
      [=](prepared_atom, uint64_t ticket) { on_prepared(self, ticket); },
      [=](taken_atom) {},  // answered once the chunks sent before it are taken (the syncer paces a commit by it)
      // The admin actor's typed store commands; answered with (ok, reason or JSON).
      [=](pin_atom, uint64_t version) -> std::tuple<bool, std::string> {
        Status pinned = self->state.store->pin(version);
        return {pinned.ok(), pinned.ok() ? "" : pinned.error().to_string()};
      },
      [=](unpin_atom, uint64_t version) -> std::tuple<bool, std::string> {
        Status unpinned = self->state.store->unpin(version);
        if (unpinned.ok()) (void)self->state.store->apply_retention();
        return {unpinned.ok(), unpinned.ok() ? "" : unpinned.error().to_string()};
      },
      [=](audit_atom, const std::string& entry_json) -> std::tuple<bool, std::string> {
        Status appended = self->state.store->append_event("admin", entry_json);
        return {appended.ok(), appended.ok() ? "" : appended.error().to_string()};
      },
      [=](audit_atom, uint32_t count) -> std::tuple<bool, std::string> {
        // The newest `count` admin entries, however many other events came after them.
        auto events = self->state.store->recent_events(count, "admin");
        if (!events) return {false, events.error().to_string()};
        nlohmann::json entries = nlohmann::json::array();
        for (const auto& e : *events) {
          auto j = nlohmann::json::parse(e.json, nullptr, false);
          entries.push_back({{"sequence", e.sequence}, {"unix_ms", e.unix_ms}, {"entry", j.is_discarded() ? nlohmann::json(e.json) : j}});
        }
        std::reverse(entries.begin(), entries.end());  // oldest first
        return {true, entries.dump()};
      },
      [=](admin_atom, WireBytes& bytes) -> WireBytes {
        auto& st = self->state;
        auto request = read_admin_request(std::move(bytes));
        if (request && request->command == "versions") {
          // Every stored version with a digest of its parameters (tests: committed versions never change).
          nlohmann::json versions = nlohmann::json::array();
          auto list = st.store->list();
          for (const auto& info : list ? *list : std::vector<storage::VersionInfo>{}) {
            auto data = st.store->get(info.version);
            if (!data) continue;
            uint64_t digest = 0;
            nlohmann::json outer = nlohmann::json::array();
            for (const auto& [fragment, blob] : data->fragments) {
              digest = digest * 1000003u ^ chunk_checksum(blob.data(), blob.size()) ^ fragment;
              auto it = data->optimizer_state.find(fragment);
              outer.push_back(it == data->optimizer_state.end() ? 0 : chunk_checksum(it->second.data(), it->second.size()));
            }
            versions.push_back({{"version", info.version}, {"digest", digest}, {"outer_digests", outer},
                                {"pinned", info.pinned}, {"committed_unix_ms", info.committed_unix_ms}});
          }
          return admin_reply("store", request->request_id, true, "ok", {{"versions", versions}});
        }
        if (request && request->command == "version" && request->args.size() == 1) {
          // One version: its record, blobs, manifest, and whether every blob still verifies.
          const uint64_t wanted = std::strtoull(request->args[0].c_str(), nullptr, 10);
          auto list = st.store->list();
          if (!list) return admin_reply("store", request->request_id, false, list.error().to_string(), {});
          for (const auto& info : *list) {
            if (info.version != wanted) continue;
            nlohmann::json blobs = nlohmann::json::array();
            for (const auto& e : info.entries) {
              blobs.push_back({{"fragment", e.fragment}, {"role", e.role == storage::BlobRole::parameters ? "parameters"
                                                                                                    : "outer_state"},
                               {"bytes", e.size}, {"xxh3_128", e.hash.to_hex()}});
            }
            auto manifest = nlohmann::json::parse(info.manifest_json, nullptr, false);
            Status verified = st.store->verify(wanted);
            return admin_reply("store", request->request_id, true, "ok",
                               {{"version", wanted}, {"committed_unix_ms", info.committed_unix_ms},
                                {"pinned", info.pinned}, {"total_bytes", info.total_bytes}, {"blobs", blobs},
                                {"verified", verified.ok()},
                                {"verify_error", verified.ok() ? "" : verified.error().to_string()},
                                {"manifest", manifest.is_discarded() ? nlohmann::json(info.manifest_json) : manifest}});
          }
          return admin_reply("store", request->request_id, false,
                             "no committed version " + request->args[0] + " in the store (see versions)", {});
        }
        auto latest = st.store->latest_committed_version();
        StoreStatus status;
        status.commits = st.commits;
        status.failed_commits = st.failed_commits;
        status.bytes_received = st.bytes_received;
        status.bytes_served = st.bytes_served;
        status.bytes_served_learners = st.bytes_served_learners;
        status.fragments_held = st.fragments_held;
        status.serves = st.serves;
        status.latest_version = latest ? *latest : 0;
        return admin_reply("store", request ? request->request_id : 0, true, "ok", status);
      },
  };
}

}  // namespace

caf::actor spawn_store_actor(caf::actor_system& system, std::shared_ptr<storage::CheckpointStore> store,
                             ShardOptions shard) {
  return system.spawn<caf::detached>(store_behavior, std::move(store), shard);
}

}  // namespace archipelago::actors
