#include "storage/commit_tickets.hpp"

#include <iterator>
#include <string>

namespace archipelago::storage {

bool CommitTickets::takes_pieces(uint64_t ticket) const {
  if (ticket == 0) return false;
  auto it = tickets_.find(ticket);
  return it == tickets_.end() || (!it->second.preparing && !it->second.prepared);
}

Status CommitTickets::add_piece(const TensorPiece& piece) {
  if (!takes_pieces(piece.ticket)) {
    return make_error(ErrorCode::invalid_argument, "ticket " + std::to_string(piece.ticket) + " takes no pieces");
  }
  Ticket& ticket = tickets_[piece.ticket];
  const auto& whole = piece.role == BlobRole::parameters ? ticket.whole.fragments : ticket.whole.optimizer_state;
  if (whole.count(piece.fragment)) {
    return make_error(ErrorCode::conflict, "fragment " + std::to_string(piece.fragment) + " is whole already");
  }
  const auto key = std::make_pair(piece.fragment, piece.role);
  auto it = ticket.tensors.find(key);
  if (it == ticket.tensors.end()) {  // the first piece: the file of the whole tensor
    auto file = store_->incoming(piece.tensor_bytes);
    if (!file) {
      ticket.tensors[key].failed = true;
      return file.error();
    }
    it = ticket.tensors.emplace(key, IncomingTensor{std::move(*file), piece.tensor_bytes, 0, {}, false}).first;
  }
  IncomingTensor& tensor = it->second;
  if (tensor.failed) return make_error(ErrorCode::io, "an earlier write of this tensor failed");
  if (piece.tensor_bytes != tensor.bytes || piece.offset > tensor.bytes || piece.size > tensor.bytes - piece.offset) {
    return make_error(ErrorCode::inconsistent, "a piece outside its tensor of " + std::to_string(tensor.bytes) + " bytes");
  }
  const uint64_t end = piece.offset + piece.size;
  auto next = tensor.ranges.lower_bound(piece.offset);
  const bool overlaps_next = next != tensor.ranges.end() && next->first < end;
  const bool overlaps_previous = next != tensor.ranges.begin() && std::prev(next)->second > piece.offset;
  if (overlaps_next || overlaps_previous) {
    return make_error(ErrorCode::conflict, "a piece overlaps bytes already written");
  }
  Status written = tensor.file.write_at(piece.offset, piece.data, piece.size);
  if (!written.ok()) {
    tensor.failed = true;  // stays incomplete: the ticket fails at its end
    return written;
  }
  tensor.ranges.emplace(piece.offset, end);
  tensor.written += piece.size;
  if (tensor.written == tensor.bytes) {
    auto& target = piece.role == BlobRole::parameters ? ticket.whole.fragments : ticket.whole.optimizer_state;
    target[piece.fragment] = std::move(tensor.file);
    ticket.tensors.erase(it);
  }
  return Status::success();
}

void CommitTickets::lose_piece(uint64_t ticket) {
  if (ticket == 0 || !takes_pieces(ticket)) return;
  tickets_[ticket].lost_piece = true;
}

Expected<CheckpointStore::IncomingCommit> CommitTickets::begin_prepare(uint64_t ticket) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end() || it->second.preparing || it->second.prepared) {
    return make_error(ErrorCode::not_found, "ticket " + std::to_string(ticket) + " has no chunks to prepare");
  }
  if (!it->second.tensors.empty() || it->second.lost_piece) {
    tickets_.erase(it);
    return make_error(ErrorCode::truncated, "incomplete tensors");
  }
  it->second.preparing = true;
  return std::move(it->second.whole);
}

Expected<CheckpointStore::PreparedCommit> CommitTickets::prepare(CheckpointStore& store,
                                                                 CheckpointStore::IncomingCommit commit,
                                                                 uint64_t ticket) {
  return store.prepare_incoming(std::move(commit), ticket);
}

Expected<CommitTickets::Prepared> CommitTickets::finish_prepare(uint64_t ticket,
                                                                Expected<CheckpointStore::PreparedCommit> result) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end() || it->second.abandoned) {
    if (result.ok()) store_->discard(std::move(*result));
    if (it != tickets_.end()) tickets_.erase(it);
    return Prepared::abandoned;
  }
  if (!result.ok()) {
    tickets_.erase(it);
    return result.error();
  }
  it->second.preparing = false;
  it->second.prepared = std::move(*result);
  return Prepared::prepared;
}

bool CommitTickets::is_prepared(uint64_t ticket) const {
  auto it = tickets_.find(ticket);
  return it != tickets_.end() && it->second.prepared.has_value();
}

Expected<CommitStats> CommitTickets::record(uint64_t ticket, uint64_t version, std::string manifest_json,
                                            std::vector<uint32_t> carried) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end() || !it->second.prepared) {
    return make_error(ErrorCode::not_found, "ticket " + std::to_string(ticket) + " is not prepared");
  }
  auto prepared = std::move(*it->second.prepared);
  tickets_.erase(it);
  return store_->commit_prepared(std::move(prepared), version, std::move(manifest_json), std::move(carried));
}

void CommitTickets::drop(uint64_t ticket) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return;
  if (it->second.preparing) {
    it->second.abandoned = true;
    return;
  }
  if (it->second.prepared) store_->discard(std::move(*it->second.prepared));
  tickets_.erase(it);
}

void CommitTickets::drop_all() {
  for (auto it = tickets_.begin(); it != tickets_.end();) drop((it++)->first);
}

}  // namespace archipelago::storage
