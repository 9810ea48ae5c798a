#include "comm/piece_queue.h"

#include <fmt/core.h>

#include "comm/progress.h"
#include "util/debug_buffers.h"
#include "zero/error.h"

namespace zero::comm_detail {
namespace {

// ZERO_DEBUG_BUFFERS: where each buffer MPI was given points when its piece starts, so that its
// completion can check the memory is still there (not released, not moved).
std::vector<const void*> addresses(const MpiPiece& piece) {
  std::vector<const void*> out;
  if (!piece.buffers) return out;
  for (const auto& t : piece.buffers()) out.push_back(t.defined() ? t.data_ptr() : nullptr);
  return out;
}

std::string check_alive(const MpiPiece& piece) {
  if (!piece.buffers) return {};
  const auto now = piece.buffers();
  const auto& started_at = piece.started_at;
  for (size_t i = 0; i < now.size() && i < started_at.size(); ++i) {
    const at::Tensor& t = now[i];
    if (!t.defined() || t.numel() == 0) continue;  // an empty chunk has no memory to lose
    const auto needed = static_cast<size_t>((t.storage_offset() + t.numel()) * t.element_size());
    if (t.storage().data() == nullptr || t.storage().nbytes() < needed || t.data_ptr() != started_at[i]) {
      return fmt::format("buffer {} of the collective was released or moved while MPI still used it", i);
    }
  }
  return {};
}

}  // namespace

PieceQueue::PieceQueue(size_t window, int rank) : window_(std::max<size_t>(window, 1)), rank_(rank) {}

PieceQueue::~PieceQueue() {
  // Note: MPI still owns the buffers of pieces in flight; freeing them first would let it write
  // into released memory. Pieces never started are dropped (no rank can be waiting for them:
  // destruction means the communicator is gone).
  for (auto& running : in_flight_) MPI_Wait(&running.request, MPI_STATUS_IGNORE);
}

std::shared_ptr<PieceQueue::Collective> PieceQueue::submit(std::string what, std::vector<MpiPiece> pieces,
                                                           std::vector<at::Tensor> keep_alive) {
  auto c = std::make_shared<Collective>();
  c->what = std::move(what);
  c->pieces = std::move(pieces);
  c->keep_alive = std::move(keep_alive);
  c->remaining = c->pieces.size();
  for (size_t i = 0; i < c->pieces.size(); ++i) queued_.push_back({c, i});
  start_more();
  return c;
}

void PieceQueue::start_next() {
  Entry entry = std::move(queued_.front());
  queued_.pop_front();
  Collective& c = *entry.collective;
  MpiPiece& piece = c.pieces[entry.index];
  if (piece.prepare) piece.prepare();
  if (debug_buffers()) piece.started_at = addresses(piece);
  MPI_Request request;
  const int code = piece.start(&request);
  if (code != MPI_SUCCESS) {
    c.error = c.what + " failed: " + mpi_error_string(code);
    --c.remaining;
    piece = {};
    drop_queued(c);
    return;
  }
  in_flight_.push_back({std::move(entry), request});
}

void PieceQueue::drop_queued(const Collective& c) {
  for (auto it = queued_.begin(); it != queued_.end();) {
    if (it->collective.get() == &c) {
      --it->collective->remaining;
      it = queued_.erase(it);
    } else {
      ++it;
    }
  }
}

bool PieceQueue::front_must_wait() const {
  if (queued_.empty()) return false;
  const Entry& front = queued_.front();
  return front.collective->pieces[front.index].after_earlier && !in_flight_.empty();
}

void PieceQueue::start_more() {
  while (!queued_.empty() && in_flight_.size() < window_ && !front_must_wait()) start_next();
}

void PieceQueue::start_all(const std::function<void()>& progress) {
  while (!queued_.empty()) {
    if (front_must_wait()) {
      // Waiting for the other ranks: the watchdog must see it (a stopped rank never answers),
      // and work of another kind they may need from this rank must go on (`progress`).
      BlockedScope blocked(in_flight_.front().entry.collective->what.c_str());
      while (front_must_wait()) {
        if (!progress) {
          retire(0, MPI_Wait(&in_flight_.front().request, MPI_STATUS_IGNORE));
          continue;
        }
        int done = 0;
        const int code = MPI_Test(&in_flight_.front().request, &done, MPI_STATUS_IGNORE);
        if (code != MPI_SUCCESS || done) {
          retire(0, code);
        } else {
          progress();
        }
      }
    }
    if (!queued_.empty()) start_next();  // (retire may have started it, and more)
  }
}

void PieceQueue::retire(size_t position, int mpi_code) {
  Entry entry = std::move(in_flight_[position].entry);
  in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(position));
  Collective& c = *entry.collective;
  MpiPiece& piece = c.pieces[entry.index];
  if (mpi_code != MPI_SUCCESS) {
    if (c.error.empty()) c.error = c.what + " failed: " + mpi_error_string(mpi_code);
  } else if (std::string dead = debug_buffers() ? check_alive(piece) : ""; !dead.empty()) {
    if (c.error.empty()) c.error = c.what + " (ZERO_DEBUG_BUFFERS): " + dead;
  } else if (piece.finish) {
    piece.finish();
  }
  piece = {};  // its staging buffers go back to the pool now
  if (--c.remaining == 0) c.keep_alive.clear();
  start_more();
}

bool PieceQueue::test(Collective& c) {
  // Every piece in flight is tested, not only c's: MPI progresses them all inside any call, and
  // finishing them frees window slots for the queue (which c's pieces may be waiting in).
  for (size_t i = 0; i < in_flight_.size();) {
    int flag = 0;
    const int code = MPI_Test(&in_flight_[i].request, &flag, MPI_STATUS_IGNORE);
    if (code == MPI_SUCCESS && !flag) {
      ++i;
      continue;
    }
    retire(i, code);
  }
  start_more();
  return c.remaining == 0;
}

void PieceQueue::wait(Collective& c) {
  if (c.remaining == 0) return;
  BlockedScope blocked(c.what.c_str());
  // Oldest first: c's pieces start only after every piece queued before them.
  while (c.remaining > 0) {
    if (in_flight_.empty()) start_more();
    if (in_flight_.empty())
      throw Error("internal: " + c.what + " waits for pieces that were never queued", c.what, rank_);
    retire(0, MPI_Wait(&in_flight_.front().request, MPI_STATUS_IGNORE));
  }
}

QueuedWork::QueuedWork(std::shared_ptr<PieceQueue> queue, std::shared_ptr<PieceQueue::Collective> collective, int rank)
    : queue_(std::move(queue)), collective_(std::move(collective)), rank_(rank) {
  if (!collective_->error.empty()) {  // a start failed: let the pieces already running finish first
    queue_->wait(*collective_);
    throw Error(collective_->error, collective_->what, rank_);
  }
}

QueuedWork::~QueuedWork() {
  if (collective_->remaining > 0) queue_->wait(*collective_);
}

void QueuedWork::wait() {
  queue_->wait(*collective_);
  if (!collective_->error.empty()) throw Error(collective_->error, collective_->what, rank_);
}

bool QueuedWork::test() {
  const bool done = queue_->test(*collective_);
  if (!collective_->error.empty() && done) throw Error(collective_->error, collective_->what, rank_);
  return done;
}

}  // namespace zero::comm_detail
