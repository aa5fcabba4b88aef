// storage/commit_tickets.hpp: commits assembled by ticket from pieces written straight into files,
// prepared, recorded (carrying fragments) or given up, with nothing left behind.
#include "storage/commit_tickets.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <memory>

#include "tests/storage/test_support.hpp"

namespace archipelago::storage {
namespace {

using testing::pattern_blob;
using testing::TempDir;

std::shared_ptr<CheckpointStore> open_store(const std::string& path, StoreOptions options = {}) {
  options.file_blob_min_bytes = 1024;  // tensors of 2048 bytes are files
  auto store = CheckpointStore::open(path, std::move(options));
  REQUIRE_MESSAGE(store.ok(), (store.ok() ? "" : store.error().to_string()));
  return std::shared_ptr<CheckpointStore>(std::move(store.value()));
}

// Temporaries in the blob directory: incoming and staged files.
size_t count_temporaries(const std::string& store_path) {
  size_t found = 0;
  for (const auto& entry : std::filesystem::directory_iterator(store_path + "/" + kBlobFilesDirectory))
    found += entry.path().extension() == ".tmp";
  return found;
}

// Adds `blob` as the tensor (fragment, role) of `ticket` in pieces of `piece` bytes, last piece first.
void add_tensor(CommitTickets& tickets, uint64_t ticket, uint32_t fragment, BlobRole role, const Blob& blob,
                uint64_t piece = 300) {
  std::vector<uint64_t> starts;
  for (uint64_t at = 0; at < blob.size(); at += piece) starts.push_back(at);
  for (auto it = starts.rbegin(); it != starts.rend(); ++it) {
    const uint64_t size = std::min<uint64_t>(piece, blob.size() - *it);
    Status added = tickets.add_piece({ticket, fragment, role, blob.size(), *it, blob.data() + *it, size});
    REQUIRE_MESSAGE(added.ok(), (added.ok() ? "" : added.error().to_string()));
  }
}

// begin_prepare, prepare and finish_prepare of `ticket`, as the store actor and its worker run them.
Expected<CommitTickets::Prepared> prepare_ticket(CommitTickets& tickets, CheckpointStore& store, uint64_t ticket) {
  auto commit = tickets.begin_prepare(ticket);
  if (!commit) return commit.error();
  return tickets.finish_prepare(ticket, CommitTickets::prepare(store, std::move(*commit), ticket));
}

TEST_CASE("commit tickets: pieces in any order make whole tensors, prepared and recorded as a version") {
  TempDir dir;
  auto store = open_store(dir.store());
  CommitTickets tickets(store);
  add_tensor(tickets, 1, 0, BlobRole::parameters, pattern_blob(10, 2048));
  add_tensor(tickets, 1, 1, BlobRole::parameters, pattern_blob(11, 2048));
  auto prepared = prepare_ticket(tickets, *store, 1);
  REQUIRE(prepared.ok());
  CHECK(*prepared == CommitTickets::Prepared::prepared);
  CHECK(store->latest_committed_version().ok() == false);  // nothing lands at prepare
  REQUIRE(tickets.record(1, 1, "{}", {}).ok());

  // Ticket 2 changes fragment 0 (and its optimizer state) and carries fragment 1 from version 1.
  add_tensor(tickets, 2, 0, BlobRole::parameters, pattern_blob(20, 2048), 1000);
  add_tensor(tickets, 2, 0, BlobRole::optimizer_state, pattern_blob(22, 512));
  CHECK(tickets.takes_pieces(2));
  REQUIRE(prepare_ticket(tickets, *store, 2).ok());
  CHECK_FALSE(tickets.takes_pieces(2));  // its pieces have ended
  CHECK(tickets.is_prepared(2));
  auto stats = tickets.record(2, 2, "{}", {1});
  REQUIRE_MESSAGE(stats.ok(), (stats.ok() ? "" : stats.error().to_string()));
  auto v2 = store->get(2).value();
  CHECK(v2.fragments.at(0) == pattern_blob(20, 2048));
  CHECK(v2.fragments.at(1) == pattern_blob(11, 2048));
  CHECK(v2.optimizer_state.at(0) == pattern_blob(22, 512));
  CHECK(tickets.size() == 0);
  CHECK(count_temporaries(dir.store()) == 0);
}

TEST_CASE("commit tickets: pieces that overlap, overrun or come after their ticket's end are refused") {
  TempDir dir;
  auto store = open_store(dir.store());
  CommitTickets tickets(store);
  const Blob blob = pattern_blob(30, 2048);
  auto piece = [&](uint64_t ticket, uint64_t tensor_bytes, uint64_t offset, uint64_t size) {
    return tickets.add_piece({ticket, 0, BlobRole::parameters, tensor_bytes, offset, blob.data() + offset, size});
  };
  CHECK(piece(0, 2048, 0, 1024).error().code == ErrorCode::invalid_argument);  // every commit has a ticket
  REQUIRE(piece(3, 2048, 1024, 1024).ok());
  CHECK(piece(3, 2048, 1000, 100).error().code == ErrorCode::conflict);   // overlaps bytes written
  CHECK(piece(3, 2048, 1024, 1024).error().code == ErrorCode::conflict);  // the same piece again
  CHECK(piece(3, 2048, 1500, 1000).error().code == ErrorCode::inconsistent);  // past the end
  CHECK(piece(3, 4096, 0, 1024).error().code == ErrorCode::inconsistent);     // another tensor size
  REQUIRE(piece(3, 2048, 0, 1024).ok());
  CHECK(piece(3, 2048, 0, 1).error().code == ErrorCode::conflict);  // the tensor is whole already
  REQUIRE(tickets.begin_prepare(3).ok());
  CHECK(piece(3, 2048, 0, 1024).error().code == ErrorCode::invalid_argument);  // after its end
  CHECK(tickets.begin_prepare(3).error().code == ErrorCode::not_found);      // preparing already
  tickets.drop(3);
}

TEST_CASE("commit tickets: a ticket with a tensor not whole fails at its end and leaves no file") {
  TempDir dir;
  auto store = open_store(dir.store());
  CommitTickets tickets(store);
  CHECK(tickets.begin_prepare(4).error().code == ErrorCode::not_found);  // no pieces
  add_tensor(tickets, 4, 0, BlobRole::parameters, pattern_blob(40, 2048));
  const Blob half = pattern_blob(41, 2048);
  REQUIRE(tickets.add_piece({4, 1, BlobRole::parameters, 2048, 0, half.data(), 1024}).ok());
  CHECK(count_temporaries(dir.store()) == 2);
  auto ended = tickets.begin_prepare(4);
  REQUIRE_FALSE(ended.ok());
  CHECK(ended.error().code == ErrorCode::truncated);
  CHECK(ended.error().reason == "incomplete tensors");
  CHECK(tickets.size() == 0);  // dropped
  CHECK(count_temporaries(dir.store()) == 0);
  CHECK(tickets.record(4, 1, "{}", {}).error().code == ErrorCode::not_found);  // not prepared
}

TEST_CASE("commit tickets: a ticket that lost a piece on its way fails at its end, whole tensors or none") {
  TempDir dir;
  auto store = open_store(dir.store());
  CommitTickets tickets(store);
  // Every piece refused before it got here: the ticket has nothing, and still fails as incomplete.
  tickets.lose_piece(6);
  auto nothing = tickets.begin_prepare(6);
  REQUIRE_FALSE(nothing.ok());
  CHECK(nothing.error().code == ErrorCode::truncated);
  // Whole tensors, and one piece lost: incomplete all the same, and its files are gone.
  add_tensor(tickets, 7, 0, BlobRole::parameters, pattern_blob(42, 2048));
  tickets.lose_piece(7);
  auto ended = tickets.begin_prepare(7);
  REQUIRE_FALSE(ended.ok());
  CHECK(ended.error().reason == "incomplete tensors");
  CHECK(count_temporaries(dir.store()) == 0);
  // A ticket whose pieces have ended is not touched by a late loss.
  add_tensor(tickets, 8, 0, BlobRole::parameters, pattern_blob(43, 2048));
  REQUIRE(tickets.begin_prepare(8).ok());
  tickets.lose_piece(8);
  tickets.lose_piece(0);  // no ticket
  CHECK(tickets.size() == 1);
  tickets.drop(8);
}

TEST_CASE("commit tickets: a ticket given up is discarded, at once or when its prepare is done") {
  TempDir dir;
  auto store = open_store(dir.store());
  CommitTickets tickets(store);
  // Given up while its worker prepares: abandoned, and what the worker made is discarded.
  add_tensor(tickets, 5, 0, BlobRole::parameters, pattern_blob(50, 2048));
  auto commit = tickets.begin_prepare(5);
  REQUIRE(commit.ok());
  tickets.drop(5);
  auto result = CommitTickets::prepare(*store, std::move(*commit), 5);
  REQUIRE(result.ok());
  auto finished = tickets.finish_prepare(5, std::move(result));
  REQUIRE(finished.ok());
  CHECK(*finished == CommitTickets::Prepared::abandoned);
  CHECK(tickets.size() == 0);
  // Given up once prepared, or while its pieces arrive (a restoring syncer drops them all).
  add_tensor(tickets, 6, 0, BlobRole::parameters, pattern_blob(60, 2048));
  REQUIRE(prepare_ticket(tickets, *store, 6).ok());
  add_tensor(tickets, 7, 0, BlobRole::parameters, pattern_blob(70, 2048));
  CHECK(count_temporaries(dir.store()) == 2);  // 6 staged, 7 incoming
  tickets.drop_all();
  CHECK(tickets.size() == 0);
  CHECK(count_temporaries(dir.store()) == 0);
  CHECK(store->latest_committed_version().ok() == false);
}

TEST_CASE("commit tickets: a failed prepare drops its ticket with the store's reason") {
  TempDir dir;
  StoreOptions options;
  options.fault_hook = [](std::string_view name) -> Status {
    if (name == "prepare.fragment.0") return make_error(ErrorCode::io, "injected");
    return Status::success();
  };
  auto store = open_store(dir.store(), options);
  CommitTickets tickets(store);
  add_tensor(tickets, 8, 0, BlobRole::parameters, pattern_blob(80, 2048));
  auto prepared = prepare_ticket(tickets, *store, 8);
  REQUIRE_FALSE(prepared.ok());
  CHECK(prepared.error().code == ErrorCode::io);
  CHECK(tickets.size() == 0);
  CHECK(count_temporaries(dir.store()) == 0);
}

}  // namespace
}  // namespace archipelago::storage
