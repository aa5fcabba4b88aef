// Commits assembled by ticket as their bytes arrive: the store's side of a commit in two steps
// (archipelago.capnp, Persist / CommitEnd).
//
// A ticket's tensors (per fragment, its parameters and its optimizer state) arrive as pieces, each
// written straight into the file of its tensor (CheckpointStore::incoming), so that a commit's
// blobs are never held in memory. Once the ticket's pieces have ended, its whole tensors are
// prepared as one commit (hashed, synced, staged: CheckpointStore::prepare_incoming), on whatever
// thread the caller chooses, and the prepared ticket is later recorded as a version, carrying the
// fragments it names from the newest version, or given up and discarded.
//
//   pieces ─add_piece─▶ writing ─begin_prepare─▶ preparing ─finish_prepare─▶ prepared ─record─▶ (version)
//                          │ (a tensor not whole: dropped)      │ drop: abandoned,        │ drop: discarded
//                          ▼                                     ▼ discarded when done     ▼
//
// Where a piece goes in its tensor is the caller's to check against the sender's geometry
// (messages::ChunkTracker); a ticket refuses a piece that overlaps what it wrote or lies past its
// tensor's end, so a tensor is whole exactly when each of its bytes was written once. A tensor
// whose write failed stays incomplete and fails its ticket at its end. One owner, one thread (the
// store actor); only `prepare` runs elsewhere, and it touches no ticket.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "storage/checkpoint_store.hpp"

namespace archipelago::storage {

// One piece of a tensor of a ticket's commit: `size` bytes at `offset` of a tensor of `tensor_bytes`.
struct TensorPiece {
  uint64_t ticket = 0;
  uint32_t fragment = 0;
  BlobRole role = BlobRole::parameters;
  uint64_t tensor_bytes = 0;
  uint64_t offset = 0;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

class CommitTickets {
 public:
  explicit CommitTickets(std::shared_ptr<CheckpointStore> store) : store_(std::move(store)) {}

  // Whether `ticket` takes pieces: not 0, and its pieces have not ended (neither preparing nor prepared).
  bool takes_pieces(uint64_t ticket) const;

  // Writes a piece into its tensor's file, made at the tensor's first piece; a tensor whose every
  // byte is written joins the ticket's commit. Errors: invalid_argument (ticket 0, or its pieces
  // have ended), inconsistent (a tensor size other than its first piece's, a piece past the end),
  // conflict (overlaps bytes written, or its tensor is whole already), io (the file; the tensor then
  // refuses every later piece).
  Status add_piece(const TensorPiece& piece);

  // A piece of `ticket` was refused before it got here (its checksum or geometry): the ticket
  // cannot be whole, and begin_prepare fails it as incomplete. Nothing for a ticket whose pieces ended.
  void lose_piece(uint64_t ticket);

  // The ticket's pieces have ended: its whole tensors as one commit for `prepare`; the ticket is
  // preparing until finish_prepare. Errors: not_found (no pieces, or already preparing or prepared;
  // nothing changes), truncated ("incomplete tensors": the ticket is dropped).
  Expected<CheckpointStore::IncomingCommit> begin_prepare(uint64_t ticket);

  // Hashes, syncs and stages a commit begin_prepare handed over (CheckpointStore::prepare_incoming).
  // Any thread: it touches `store` only.
  static Expected<CheckpointStore::PreparedCommit> prepare(CheckpointStore& store,
                                                           CheckpointStore::IncomingCommit commit, uint64_t ticket);

  // What a ticket's prepare came to: prepared (kept for record), or abandoned (given up while it ran:
  // discarded, nobody waits for an answer). Errors: the prepare's own; the ticket is dropped.
  enum class Prepared { prepared, abandoned };
  Expected<Prepared> finish_prepare(uint64_t ticket, Expected<CheckpointStore::PreparedCommit> result);

  bool is_prepared(uint64_t ticket) const;

  // Records the prepared ticket as `version` with `manifest_json`, carrying `carried` fragments from
  // the newest version (CheckpointStore::commit_prepared); the ticket is done either way. Errors:
  // not_found (not prepared; nothing changes), whatever commit_prepared says.
  Expected<CommitStats> record(uint64_t ticket, uint64_t version, std::string manifest_json,
                               std::vector<uint32_t> carried);

  // Gives a ticket up: what it wrote or prepared is discarded now, or, while it is preparing, by finish_prepare.
  void drop(uint64_t ticket);
  void drop_all();

  size_t size() const { return tickets_.size(); }

 private:
  // One tensor as its pieces arrive: its file and which byte ranges are written (offset -> end).
  struct IncomingTensor {
    IncomingBlob file;
    uint64_t bytes = 0;
    uint64_t written = 0;
    std::map<uint64_t, uint64_t> ranges;
    bool failed = false;
  };
  struct Ticket {
    bool lost_piece = false;  // a piece was refused on its way (lose_piece)
    std::map<std::pair<uint32_t, BlobRole>, IncomingTensor> tensors;  // not whole yet
    CheckpointStore::IncomingCommit whole;
    bool preparing = false;
    bool abandoned = false;  // given up while preparing
    std::optional<CheckpointStore::PreparedCommit> prepared;
  };

  std::shared_ptr<CheckpointStore> store_;
  std::map<uint64_t, Ticket> tickets_;
};

}  // namespace archipelago::storage
