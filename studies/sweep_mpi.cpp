// `mpirun -np N hexisim sweep ...`: the sweep across MPI ranks (one host or many).
//
// Every rank reads the sweep file and forks its --jobs worker processes before MPI_Init
// (so that no child ever carries MPI state). Rank 0 opens the results folder, hands points
// out and is the only writer; its own workers compute points as well. Messages (tags):
//   rank r -> 0  kRequest (empty)   r can take one more point (it asks for jobs + 1 at
//                                   first, so that a point waits while one is computed)
//   0 -> rank r  kTask (one int)    compute this point
//   0 -> rank r  kStop (empty)      no more points: finish yours, then kDone
//   rank r -> 0  kResult (chars)    a finished point's row
//   rank r -> 0  kDone (empty)      r sent its last row (MPI keeps a pair's messages in order)
// Ranks poll their workers' pipes and MPI in turn (MPI offers no descriptor to poll).

#include <mpi.h>

#include <csignal>
#include <cstring>
#include <deque>
#include <iostream>
#include <optional>

#include "engine/check.hpp"
#include "engine/comm_mpi.hpp"
#include "studies/sweep_run.hpp"

namespace hexi {
inline namespace studies {
namespace {

// A message no caller will see returned (the MPI job is about to abort, or the error after
// the one returned), on stderr as the CLI writes errors.
void print_error(const Error& e) {
  std::cerr << "hexisim: error: " << e.message << "\n";
}

enum Tag : int { kRequest = 1, kTask = 2, kStop = 3, kResult = 4, kDone = 5 };

constexpr int kPollMs = 5;  // between looks at MPI while workers compute

Status send(int dest, Tag tag, const void* data = nullptr, int count = 0,
            MPI_Datatype type = MPI_CHAR) {
  HEXI_MPI_CHECK(MPI_Send(data, count, type, dest, tag, MPI_COMM_WORLD));
  return {};
}

Result<std::pair<int, int>> world_rank_and_size() {
  int rank = 0, ranks = 1;
  HEXI_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HEXI_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
  return std::pair<int, int>(rank, ranks);
}

// A message that has arrived, received in full (payload as bytes).
struct Message {
  int source = 0;
  int tag = 0;
  std::string payload;
};

Result<std::optional<Message>> receive_any(int source) {
  int flag = 0;
  MPI_Status st;
  HEXI_MPI_CHECK(MPI_Iprobe(source, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
  if (!flag) return std::optional<Message>();
  int bytes = 0;
  HEXI_MPI_CHECK(MPI_Get_count(&st, MPI_CHAR, &bytes));
  Message m{st.MPI_SOURCE, st.MPI_TAG, std::string(static_cast<std::size_t>(bytes), '\0')};
  HEXI_MPI_CHECK(MPI_Recv(m.payload.data(), bytes, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG,
                          MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  return std::optional<Message>(std::move(m));
}

// Rank r > 0: computes what rank 0 sends, with its own workers.
Status serve(const SweepContext& ctx, WorkerPool& pool) {
  for (int i = 0; i < pool.size() + 1; ++i) HEXI_TRY(send(0, kRequest));
  std::deque<int> queued;
  int owed = 0;  // points received and not yet sent back
  bool stopped = false;
  while (!stopped || owed > 0) {
    while (pool.idle() > 0 && !queued.empty()) {
      HEXI_TRY(pool.submit(queued.front()));
      queued.pop_front();
    }
    auto done = pool.wait(kPollMs);
    HEXI_TRY(done);
    for (const auto& d : *done) {
      const std::string row =
          d.died ? error_row(ctx, ctx.sweep.points[static_cast<std::size_t>(d.index)],
                             failure(*d.died + " (rerun with --retry-failed to try it again)"),
                             d.wall_s)
                 : d.row;
      HEXI_TRY(send(0, kResult, row.data(), static_cast<int>(row.size())));
      --owed;
      if (!stopped) HEXI_TRY(send(0, kRequest));
    }
    for (;;) {
      auto m = receive_any(0);
      HEXI_TRY(m);
      if (!*m) break;
      if ((*m)->tag == kStop) stopped = true;
      if ((*m)->tag == kTask && (*m)->payload.size() == sizeof(int)) {
        int index = 0;
        std::memcpy(&index, (*m)->payload.data(), sizeof index);
        queued.push_back(index);
        ++owed;
      }
    }
  }
  return send(0, kDone);
}

// Rank 0: hands points out, computes with its own workers, records every row.
Status coordinate(const SweepContext& ctx, WorkerPool& pool, SweepRecorder& rec,
                  std::deque<int> pending, int ranks) {
  std::vector<bool> stopped(static_cast<std::size_t>(ranks), false);
  int running = ranks - 1;  // ranks that have not sent kDone
  while (running > 0 || !pending.empty() || pool.busy() > 0) {
    if (interrupted()) {
      pending.clear();
      pool.stop();
    }
    while (pool.idle() > 0 && !pending.empty()) {
      HEXI_TRY(pool.submit(pending.front()));
      pending.pop_front();
    }
    auto done = pool.wait(running > 0 ? kPollMs : 1000);
    HEXI_TRY(done);
    for (const auto& d : *done) HEXI_TRY(rec.add(d));
    for (;;) {
      auto m = receive_any(MPI_ANY_SOURCE);
      HEXI_TRY(m);
      if (!*m) break;
      const int r = (*m)->source;
      if ((*m)->tag == kDone) --running;
      if ((*m)->tag == kResult) {
        auto row = parse_json_text((*m)->payload, "rank " + std::to_string(r));
        HEXI_TRY(row);
        WorkerPool::Done d;
        d.index = row->value("index", -1);
        d.row = std::move((*m)->payload);
        if (d.index < 0 || d.index >= static_cast<int>(ctx.sweep.points.size())) {
          return failure("internal error: rank " + std::to_string(r) + " sent a bad row");
        }
        HEXI_TRY(rec.add(d));
      }
      if ((*m)->tag == kRequest && !pending.empty()) {
        const int index = pending.front();
        pending.pop_front();
        HEXI_TRY(send(r, kTask, &index, static_cast<int>(sizeof index), MPI_BYTE));
      } else if ((*m)->tag == kRequest && !stopped[static_cast<std::size_t>(r)]) {
        stopped[static_cast<std::size_t>(r)] = true;
        HEXI_TRY(send(r, kStop));
      }
    }
    rec.progress().tick();
  }
  return {};
}

// Rank 0 when the folder cannot be used: every other rank is told to stop at once.
Status stop_everyone(int ranks) {
  int running = ranks - 1;
  std::vector<bool> stopped(static_cast<std::size_t>(ranks), false);
  while (running > 0) {
    auto m = receive_any(MPI_ANY_SOURCE);
    HEXI_TRY(m);
    if (!*m) continue;
    const int r = (*m)->source;
    if ((*m)->tag == kDone) --running;
    if ((*m)->tag == kRequest && !stopped[static_cast<std::size_t>(r)]) {
      stopped[static_cast<std::size_t>(r)] = true;
      HEXI_TRY(send(r, kStop));
    }
  }
  return {};
}

Result<SweepSummary> rank0(const SweepContext& ctx, const SweepRunOptions& opt, WorkerPool& pool,
                           int ranks, std::unique_ptr<ResultStore>& store_slot) {
  install_interrupt_handlers();
  auto store = ResultStore::open(opt.out);
  Result<Resume> todo = store ? resume(ctx, **store, opt.retry_failed) : store.error();
  if (!todo) {
    if (auto st = stop_everyone(ranks); !st) print_error(st.error());
    return todo.error();
  }
  store_slot = std::move(*store);
  const std::string where = std::to_string(ranks) + " MPI ranks x " + std::to_string(pool.size()) +
                            " worker" + (pool.size() > 1 ? "s" : "");
  if (!opt.json) {
    std::cout << "sweep " << ctx.sweep.name << ": " << ctx.sweep.points.size() << " points, "
              << ctx.sweep.points.size() - todo->todo.size() << " already in "
              << store_slot->path().string() << ", " << todo->todo.size() << " to compute on "
              << where << std::endl;
  }
  const std::deque<int> pending(todo->todo.begin(), todo->todo.end());
  SweepRecorder rec(ctx, *store_slot, std::move(*todo));
  const double start = steady_seconds();
  if (auto st = coordinate(ctx, pool, rec, pending, ranks); !st) {
    print_error(st.error());
    engine::MpiSession::abort(1);
  }
  rec.progress().finish();
  if (auto st = rec.write_csv(opt.out); !st) return st.error();
  return sweep_summary(ctx, rec, opt, steady_seconds() - start, where, interrupted());
}

}  // namespace

Result<SweepSummary> run_sweep_mpi(const SweepContext& ctx, const SweepRunOptions& opt) {
  std::unique_ptr<ResultStore> store;  // rank 0's, opened after MPI_Init
  auto pool = make_pool(ctx, opt.jobs, [&store] {
    if (store) store->close_in_child();
  });
  if (auto st = pool->start(); !st) return st.error();
  auto session = engine::MpiSession::init(nullptr, nullptr);
  if (!session) return session.error();
  auto world = world_rank_and_size();
  if (!world) return world.error();
  const auto [rank, ranks] = *world;
  if (rank == 0) {
    auto summary = rank0(ctx, opt, *pool, ranks, store);
    pool->stop();
    return summary;
  }
  std::signal(SIGPIPE, SIG_IGN);
  if (auto st = serve(ctx, *pool); !st) {
    print_error(st.error());
    engine::MpiSession::abort(1);
  }
  pool->stop();
  SweepSummary worker;
  worker.parent = false;
  return worker;
}

}  // namespace studies
}  // namespace hexi
