// Checkpoint format and files (engine/checkpoint.hpp, checkpoint_files.hpp): every bad
// header or manifest field is refused with "<file>: <json path>: expected ..."; a
// corrupt, truncated or stitched folder is refused; and a save killed after any of its
// durable steps leaves the folder holding the previous checkpoint or the new one, whole.
// The same end to end under mpirun: train_cli_test.cpp.

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint_files.hpp"

namespace hexi::engine {
namespace {

namespace fs = std::filesystem;

const std::string kOrigin = "ckpt/device-0.ckpt";

const Json kHeader = {{"format", "hexisim-checkpoint"}, {"version", 2}, {"device", 0}, {"steps", 3},
                      {"fingerprint", "abc"},           {"params", 10}, {"moments", 5}};

// The error of parsing `text`, or "" when it parsed.
template <class T>
std::string error_of(const Result<T>& r) {
  return r.ok() ? "" : r.error().message;
}

// A document with the member at `pointer` set to `value` (JSON text), and the start of
// the message that must refuse it.
struct BadField {
  std::string pointer, value, expected;
};

// Every case, applied to `base`, is refused by `parse` (never thrown, never accepted) with
// a message that starts with the case's: the file, the JSON path and what was expected.
template <class Parse>
void expect_refused(const Json& base, Parse parse, const std::vector<BadField>& cases) {
  for (const auto& c : cases) {
    Json doc = base;
    doc[Json::json_pointer(c.pointer)] = Json::parse(c.value);
    const std::string msg = error_of(parse(doc.dump()));
    EXPECT_EQ(msg.rfind(c.expected, 0), 0u) << c.pointer << " = " << c.value << ": " << msg;
  }
}

TEST(CheckpointHeader, RoundTrips) {
  CheckpointHeader h{7, 123, "00ff", 1000, 250};
  auto back = parse_checkpoint_header(to_text(h), kOrigin);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->device, 7);
  EXPECT_EQ(back->steps, 123);
  EXPECT_EQ(back->fingerprint, "00ff");
  EXPECT_EQ(back->params, 1000);
  EXPECT_EQ(back->moments, 250);
  EXPECT_EQ(back->data_bytes(), 4u * (1000 + 2 * 250));
}

TEST(CheckpointHeader, RefusesBadFieldsNamingThem) {
  const std::string o = kOrigin + ": ";
  auto parse = [](const std::string& text) { return parse_checkpoint_header(text, kOrigin); };
  expect_refused(
      kHeader, parse,
      {
          {"/steps", "\"x\"", o + "/steps: expected an integer"},
          {"/steps", "-1e9", o + "/steps: expected an integer in [0, 2147483647], got -1"},
          {"/steps", "-1", o + "/steps: expected an integer in [0, 2147483647]"},
          {"/steps", "1e300", o + "/steps: expected an integer"},
          {"/steps", "2147483648", o + "/steps: expected an integer in [0, 2147483647]"},
          {"/steps", "2.5", o + "/steps: expected an integer"},
          {"/steps", "null", o + "/steps: expected an integer"},
          {"/device", "\"0\"", o + "/device: expected an integer"},
          {"/device", "-2", o + "/device: expected an integer in [0, 2147483647]"},
          {"/params", "1e300", o + "/params: expected an integer"},
          {"/moments", "[]", o + "/moments: expected an integer"},
          {"/fingerprint", "12", o + "/fingerprint: expected a string"},
          {"/format", "\"other\"", o + "/format: expected \"hexisim-checkpoint\""},
          {"/version", "1", o + "/version: expected format version 2"},
          {"/version", "\"2\"", o + "/version: expected format version 2"},
          {"/extra", "1", o + "/: unknown field \"extra\""},
      });
}

TEST(CheckpointHeader, RefusesWhatIsNotAHeader) {
  EXPECT_NE(error_of(parse_checkpoint_header("", kOrigin)).find(kOrigin), std::string::npos);
  EXPECT_NE(error_of(parse_checkpoint_header("[1]", kOrigin)).find("/: expected an object"),
            std::string::npos);
  EXPECT_NE(error_of(parse_checkpoint_header(std::string(100000, '['), kOrigin)).find(kOrigin),
            std::string::npos);
  Json h = kHeader;
  h.erase("fingerprint");
  EXPECT_NE(error_of(parse_checkpoint_header(h.dump(), kOrigin))
                .find("/: missing required field \"fingerprint\""),
            std::string::npos);
}

CheckpointManifest two_device_manifest() {
  return {5,
          2,
          {{0, "device-0.step-5.0123456789abcdef.ckpt", 100, "0123456789abcdef"},
           {1, "device-1.step-5.fedcba9876543210.ckpt", 200, "fedcba9876543210"}}};
}

TEST(CheckpointManifest, RoundTrips) {
  auto back = parse_checkpoint_manifest(to_text(two_device_manifest()), "m.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->steps, 5);
  EXPECT_EQ(back->devices, 2);
  ASSERT_EQ(back->files.size(), 2u);
  EXPECT_EQ(back->files[1].device, 1);
  EXPECT_EQ(back->files[1].file, "device-1.step-5.fedcba9876543210.ckpt");
  EXPECT_EQ(back->files[1].bytes, 200u);
  EXPECT_EQ(back->files[1].fnv1a64, "fedcba9876543210");
  auto entry = parse_manifest_file(to_text(back->files[0]), "rank 0");
  ASSERT_TRUE(entry.ok()) << entry.error().message;
  EXPECT_EQ(entry->file, back->files[0].file);
}

TEST(CheckpointManifest, FileNamesMayUseEveryLetterDigitAndDotUnderscoreDash) {
  CheckpointManifest m = two_device_manifest();
  m.files[0].file = "azAZ09._-device-0.ckpt";  // each end of every allowed range
  auto back = parse_checkpoint_manifest(to_text(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->files[0].file, m.files[0].file);
}

TEST(CheckpointManifest, RefusesBadFieldsNamingThem) {
  const std::string plain = "expected a plain file name";
  auto parse = [](const std::string& text) { return parse_checkpoint_manifest(text, "m.json"); };
  expect_refused(
      Json::parse(to_text(two_device_manifest())), parse,
      {
          {"/steps", "\"x\"", "m.json: /steps: expected an integer"},
          {"/steps", "1e300", "m.json: /steps: expected an integer"},
          {"/steps", "-1e9", "m.json: /steps: expected an integer in [0, 2147483647]"},
          {"/devices", "3", "m.json: /files: expected one entry per device (3)"},
          {"/devices", "0", "m.json: /devices: expected an integer in [1, 2147483647]"},
          {"/files/1/device", "0", "m.json: /files/1/device: expected a device not listed yet"},
          {"/files/1/file", "\"device-0.step-5.0123456789abcdef.ckpt\"",
           "m.json: /files/1/file: expected a file not listed yet"},
          {"/files/0/file", "\"../../etc/passwd\"", "m.json: /files/0/file: " + plain},
          {"/files/0/file", "\"/tmp/x\"", "m.json: /files/0/file: " + plain},
          {"/files/0/file", "\".hidden\"", "m.json: /files/0/file: " + plain},
          {"/files/0/file", "\"\"", "m.json: /files/0/file: " + plain},
          // The characters just outside each allowed range.
          {"/files/0/file", "\"a{b\"", "m.json: /files/0/file: " + plain},
          {"/files/0/file", "\"a`b\"", "m.json: /files/0/file: " + plain},
          {"/files/0/file", "\"a[b\"", "m.json: /files/0/file: " + plain},
          {"/files/0/file", "\"a@b\"", "m.json: /files/0/file: " + plain},
          {"/files/0/file", "\"a:b\"", "m.json: /files/0/file: " + plain},
          {"/files/0/bytes", "0", "m.json: /files/0/bytes: expected an integer >= 1"},
          {"/files/0/bytes", "\"100\"", "m.json: /files/0/bytes: expected an integer"},
          {"/files/0/fnv1a64", "\"0123\"", "m.json: /files/0/fnv1a64: expected 16 lowercase hex"},
          {"/files/0/fnv1a64", "\"0123456789ABCDEF\"", "m.json: /files/0/fnv1a64: expected 16"},
          {"/files/0/size", "1", "m.json: /files/0: unknown field \"size\""},
          {"/files", "{}", "m.json: /files: expected an array"},
          {"/format", "\"hexisim-checkpoint\"",
           "m.json: /format: expected \"hexisim-checkpoint-manifest\""},
          {"/version", "1", "m.json: /version: expected format version 2"},
      });
}

// FNV-1a 64 reference values (the algorithm's published test vectors).
TEST(Fnv1a, MatchesReferenceValues) {
  Fnv1a empty;
  EXPECT_EQ(empty.hex(), "cbf29ce484222325");
  Fnv1a a;
  a.update("a", 1);
  EXPECT_EQ(a.hex(), "af63dc4c8601ec8c");
  Fnv1a foobar;
  foobar.update("foo", 3);
  foobar.update("bar", 3);  // in pieces: the same as in one
  EXPECT_EQ(foobar.hex(), "85944171f73967e8");
}

// ---- files -----------------------------------------------------------------------------

// One saved state of a small job: per device, parameters and moments derived from `seed`.
struct Generation {
  int steps = 0;
  float seed = 0;
  static constexpr int kDevices = 3;
  std::vector<float> params(int d) const { return values(40 + d, 1); }
  std::vector<float> moment(int d, int which) const { return values(15 + d, 10 + which); }

 private:
  std::vector<float> values(int n, int salt) const {
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = seed * 1000 + salt * 100 + i;
    return v;
  }
};

// Saves `g` into `dir` the way a job does: every device's file, then the manifest.
void save(const fs::path& dir, const Generation& g, SavePoints& points) {
  CheckpointManifest m{g.steps, Generation::kDevices, {}};
  for (int d = 0; d < Generation::kDevices; ++d) {
    const auto p = g.params(d), m1 = g.moment(d, 1), m2 = g.moment(d, 2);
    CheckpointHeader h{d, g.steps, "fp", static_cast<std::int64_t>(p.size()),
                       static_cast<std::int64_t>(m1.size())};
    auto entry = write_device_file(dir, h, {p, m1, m2}, points);
    ASSERT_TRUE(entry.ok()) << entry.error().message;
    m.files.push_back(*entry);
  }
  Status published = publish_manifest(dir, m, points);
  ASSERT_TRUE(published.ok()) << published.error().message;
}

void save(const fs::path& dir, const Generation& g) {
  SavePoints never;
  save(dir, g, never);
}

// The generation `dir` holds, whole on every device; nullopt when it holds none (a
// message says why) or a mix.
std::optional<Generation> loaded(const fs::path& dir, const std::vector<Generation>& candidates,
                                 std::string* why = nullptr) {
  auto manifest = read_manifest(dir);
  if (!manifest.ok()) {
    if (why) *why = manifest.error().message;
    return std::nullopt;
  }
  for (const auto& g : candidates) {
    bool all = manifest->steps == g.steps;
    for (int d = 0; d < Generation::kDevices && all; ++d) {
      auto c = read_device_file(dir, *manifest, d);
      if (!c.ok()) {
        if (why) *why = c.error().message;
        return std::nullopt;
      }
      all =
          c->params == g.params(d) && c->moment1 == g.moment(d, 1) && c->moment2 == g.moment(d, 2);
    }
    if (all) return g;
  }
  if (why) *why = "a mix of saves";
  return std::nullopt;
}

class CheckpointFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hexisim-ckpt-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The file the manifest names for `device`.
  fs::path file_of(int device) const {
    auto m = read_manifest(dir_);
    EXPECT_TRUE(m.ok());
    return dir_ / m->files[device].file;
  }
  std::string refusal() const {
    std::string why;
    EXPECT_FALSE(loaded(dir_, {old_, new_}, &why)) << "loaded although damaged";
    return why;
  }

  fs::path dir_;
  Generation old_{2, 1.0f}, new_{4, 2.0f};
};

TEST_F(CheckpointFiles, SaveReplacesThePreviousCheckpointAndLeavesOnlyItsFiles) {
  save(dir_, old_);
  ASSERT_EQ(loaded(dir_, {old_})->steps, 2);
  save(dir_, new_);
  ASSERT_EQ(loaded(dir_, {new_})->steps, 4);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
  EXPECT_EQ(names.size(), 1u + Generation::kDevices);  // the manifest and one file per device
}

// One job saves to a folder at a time, and never to one another job resumes from; jobs
// resuming from one folder share it. Refused at once, naming the holder.
TEST_F(CheckpointFiles, OneJobAtATimeSavesToAFolder) {
  fs::create_directories(dir_);
  auto saving = CheckpointLock::take("--save", dir_, true);
  ASSERT_TRUE(saving.ok()) << saving.error().message;
  for (bool exclusive : {true, false}) {
    auto second = CheckpointLock::take("--save", dir_, exclusive);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(second.error().message.find("another job is using this checkpoint folder "
                                          "(hexisim train, pid " +
                                          std::to_string(getpid()) + ")"),
              std::string::npos)
        << second.error().message;
  }
  { CheckpointLock ended = std::move(*saving); }
  auto reader = CheckpointLock::take("--resume", dir_, false);
  auto another_reader = CheckpointLock::take("--resume", dir_, false);
  ASSERT_TRUE(reader.ok() && another_reader.ok());
  auto writer = CheckpointLock::take("--save", dir_, true);
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.error().message.find("(a job resuming from it)"), std::string::npos)
      << writer.error().message;
  EXPECT_TRUE(CheckpointLock::take("--resume", dir_ / "absent", false).ok());
}

// A save's temporaries are never links planted under a predictable name.
TEST_F(CheckpointFiles, APlantedLinkIsNeverWrittenThrough) {
  fs::create_directories(dir_);
  const fs::path victim = dir_.string() + "-victim";
  std::ofstream(victim) << "precious";
  for (int d = 0; d < Generation::kDevices; ++d) {
    fs::create_symlink(victim, dir_ / ("device-" + std::to_string(d) + ".step-2.ckpt.tmp"));
  }
  fs::create_symlink(victim, dir_ / "manifest.json.tmp");
  save(dir_, old_);
  EXPECT_EQ(loaded(dir_, {old_})->steps, 2);
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious");
  fs::remove(victim);
}

TEST_F(CheckpointFiles, RefusesAFolderWithoutManifest) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "device-0.ckpt") << "{}\n";  // a format-1 checkpoint had no manifest
  EXPECT_NE(refusal().find(dir_.string() + "/manifest.json: not found"), std::string::npos);
}

TEST_F(CheckpointFiles, RefusesACorruptFile) {
  save(dir_, old_);
  const fs::path f = file_of(1);
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(-3, std::ios::end);
  io.put('\x7f');  // one byte of the second moments
  io.close();
  const std::string why = refusal();
  EXPECT_NE(why.find(f.string() + ": FNV-1a digest"), std::string::npos) << why;
  EXPECT_NE(why.find("(the file is corrupt)"), std::string::npos) << why;
}

TEST_F(CheckpointFiles, RefusesATruncatedFile) {
  save(dir_, old_);
  const fs::path f = file_of(2);
  fs::resize_file(f, fs::file_size(f) - 4);
  const std::string why = refusal();
  EXPECT_NE(why.find(f.string() + ": "), std::string::npos) << why;
  EXPECT_NE(why.find("(truncated or replaced)"), std::string::npos) << why;
}

// A folder whose devices hold different steps: device 1's file of the old save named (with
// its own size and digest) in the new save's manifest. The file itself is intact, so only
// the header's step gives it away.
TEST_F(CheckpointFiles, RefusesAStitchedFolder) {
  const fs::path other = dir_ / "other";
  save(other, old_);
  save(dir_, new_);
  auto old_manifest = read_manifest(other);
  auto manifest = read_manifest(dir_);
  ASSERT_TRUE(old_manifest.ok() && manifest.ok());
  const ManifestFile stale = old_manifest->files[1];
  fs::copy_file(other / stale.file, dir_ / stale.file);
  manifest->files[1] = stale;
  std::ofstream(manifest_path(dir_)) << to_text(*manifest);
  const std::string why = refusal();
  EXPECT_NE(why.find(stale.file + ": a checkpoint of step 2, but " + manifest_path(dir_).string() +
                     " is of step 4 (files of different saves)"),
            std::string::npos)
      << why;
}

// Runs `save(dir, g)` in a child process killed (SIGKILL) after its `point`-th durable step;
// returns true when the child was killed, false when the save finished first.
bool save_killed_at(const fs::path& dir, const Generation& g, int point) {
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    SavePoints points(point);
    save(dir, g, points);
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return true;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "point " << point;
  return false;
}

// Kills a save after each of its durable steps in turn (writes, fsyncs, renames, removals;
// every device's file, then the manifest): the folder always holds the old checkpoint or
// the new one, whole, and both outcomes occur. Also when the new save is of the same step
// as the old one (a fresh run saved over an old folder): the files' names differ by digest.
TEST_F(CheckpointFiles, AKillAtAnyPointLeavesTheOldOrTheNewCheckpoint) {
  const fs::path pristine = dir_ / "pristine", work = dir_ / "work";
  for (const Generation& next : {new_, Generation{old_.steps, 3.0f}}) {
    fs::remove_all(pristine);
    save(pristine, old_);
    int killed = 0, old_seen = 0, new_seen = 0;
    for (int point = 1; point < 100; ++point) {
      fs::remove_all(work);
      fs::copy(pristine, work);
      const bool was_killed = save_killed_at(work, next, point);
      std::string why;
      auto got = loaded(work, {old_, next}, &why);
      ASSERT_TRUE(got.has_value()) << "killed after point " << point << ": " << why;
      (got->seed == old_.seed ? old_seen : new_seen)++;
      if (!was_killed) break;
      ++killed;
      // The next save over an interrupted one works and leaves only its own files.
      save(work, next);
      EXPECT_EQ(std::distance(fs::directory_iterator(work), fs::directory_iterator()),
                1 + Generation::kDevices)
          << "point " << point;
    }
    // 3 devices x (4 writes, fsync, rename, folder fsync) + manifest (write, fsync,
    // rename, folder fsync) + removal of the 3 old files.
    EXPECT_EQ(killed, 3 * 7 + 4 + 3);
    EXPECT_GT(old_seen, 0);
    EXPECT_GT(new_seen, 0);
  }
}

}  // namespace
}  // namespace hexi::engine
