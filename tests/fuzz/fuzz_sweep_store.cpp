// libFuzzer target: a sweep's results.jsonl as `hexisim sweep` reads it when it resumes
// (ResultStore::open, then resume() against the shipped sweep scenarios/sweeps/tiny.json and
// the CSV of its rows). The store reads only from its folder: the input is written to
// results.jsonl in a folder of this process's own (removed at exit). Bad input is an Error
// of kind bad input; an opened store holds rows that are objects with a string "key" and an
// integer "index", has dropped a torn last line exactly when the input ends in one, and opens
// again to the same rows with nothing dropped; a resume splits the sweep's points into rows
// and points to compute, each once; with --retry-failed no error row is left in the file.

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "studies/sweep_run.hpp"
#include "studies/sweep_store.hpp"
#include "tests/fuzz/fuzz.hpp"
#include "topologies/paths.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path& store_dir() {
  return hexi::fuzz::process_dir("hexisim-fuzz-sweep-store");
}

std::unique_ptr<hexi::ResultStore> open_store(std::string_view what) {
  auto store = hexi::ResultStore::open(store_dir());
  if (!store) {
    hexi::fuzz::check(store.error().kind == hexi::ErrorKind::kBadInput,
                      "opening a store failed on its own", store.error().message);
    return nullptr;
  }
  for (const hexi::Json& row : (*store)->rows()) {
    hexi::fuzz::check(row.is_object() && row.contains("key") && row["key"].is_string() &&
                          row.contains("index") && row["index"].is_number_integer(),
                      "a store row without a string key and an integer index", what);
  }
  return std::move(*store);
}

void check_resume(const hexi::SweepContext& ctx, const hexi::Resume& r) {
  using namespace hexi;
  std::set<int> points;
  for (const Json& row : r.rows) {
    const int index = row["index"].get<int>();
    fuzz::check(index >= 0 && index < static_cast<int>(ctx.sweep.points.size()),
                "a resumed row's index out of range");
    fuzz::check(points.insert(index).second, "a point resumed twice");
  }
  for (int index : r.todo) fuzz::check(points.insert(index).second, "a resumed point to compute");
  fuzz::check(points.size() == ctx.sweep.points.size(), "a point neither resumed nor to compute");
  (void)results_csv(r.rows, ctx.sweep.metrics);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  static const SweepContext ctx = fuzz::must(
      load_sweep_context((data_root() / "scenarios/sweeps/tiny.json").string()), "tiny sweep");
  const fs::path file = store_dir() / "results.jsonl";
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  const std::string_view text = fuzz::text_of(data, size);
  std::unique_ptr<ResultStore> store = open_store("first open");
  if (!store) return 0;
  const std::size_t last_newline = text.rfind('\n');
  const bool torn = last_newline == std::string_view::npos ? size > 0 : last_newline + 1 < size;
  fuzz::check(store->dropped().empty() != torn, "a torn last line dropped or not as it is");
  (void)results_csv(store->rows(), ctx.sweep.metrics);
  const std::vector<Json> rows = store->rows();
  store.reset();

  store = open_store("second open");
  fuzz::check(store != nullptr, "a store that opened does not open again");
  fuzz::check(store->dropped().empty(), "a second open dropped a line");
  fuzz::check(store->rows() == rows, "a second open read other rows");
  auto resumed = resume(ctx, *store, false);
  if (resumed) check_resume(ctx, *resumed);

  auto retried = resume(ctx, *store, true);
  if (retried) check_resume(ctx, *retried);
  store.reset();
  store = open_store("open after --retry-failed");
  fuzz::check(store != nullptr, "a store does not open after --retry-failed");
  for (const Json& row : store->rows()) {
    fuzz::check(!row.contains("error"), "an error row left by --retry-failed");
  }
  return 0;
}
