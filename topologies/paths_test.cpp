// Output files: checked before the work, never over an input, replaced atomically.
#include "topologies/paths.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace hexi {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const auto dir =
      fs::temp_directory_path() / ("hexisim-paths-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Paths, OutputMayNotBeAnInputByAnySpelling) {
  const auto dir = scratch("input");
  std::ofstream(dir / "s.json") << "{}";
  fs::create_symlink(dir / "s.json", dir / "link.json");
  const std::vector<fs::path> inputs = {dir / "s.json"};
  for (const fs::path& out : {dir / "s.json", dir / "." / "s.json", dir / "link.json"}) {
    auto st = check_output_file("--out", out, inputs);
    ASSERT_FALSE(st.ok()) << out;
    EXPECT_EQ(st.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(st.error().message.find("is an input of this command"), std::string::npos)
        << st.error().message;
  }
  EXPECT_TRUE(check_output_file("--out", dir / "other.json", inputs).ok());
  EXPECT_TRUE(check_output_file("--out", dir / "new" / "deeper" / "p.json", inputs).ok());
  fs::remove_all(dir);
}

TEST(Paths, OutputMustBeWritableFile) {
  const auto dir = scratch("writable");
  std::ofstream(dir / "file") << "x";
  auto st = check_output_file("--trace", dir, {});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("--trace " + dir.string() + ": is a folder"),
            std::string::npos);
  st = check_output_file("--trace", dir / "file" / "t.json", {});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("cannot create the folder " + (dir / "file").string()),
            std::string::npos)
      << st.error().message;
  // access() says yes to root here; the probe file does not.
  st = check_output_file("--trace", "/proc/t.json", {});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("cannot write in the folder /proc"), std::string::npos)
      << st.error().message;
  fs::remove_all(dir);
}

TEST(Paths, AtomicWriteReplacesWholeAndLeavesNoTemporary) {
  const auto dir = scratch("atomic");
  bool replaced = true;
  ASSERT_TRUE(write_file_atomically(dir / "sub" / "a.json", "first", &replaced).ok());
  EXPECT_FALSE(replaced);
  ASSERT_TRUE(write_file_atomically(dir / "sub" / "a.json", "second", &replaced).ok());
  EXPECT_TRUE(replaced);
  EXPECT_EQ(read(dir / "sub" / "a.json"), "second");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir / "sub")) ++entries;
  EXPECT_EQ(entries, 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hexi
