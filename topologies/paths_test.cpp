// Output files: checked before the work, never over an input, replaced atomically.
#include "topologies/paths.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

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

TEST(Paths, DevicesAndFifosAreWrittenInPlace) {
  struct stat st {};
  ASSERT_TRUE(check_output_file("--out", "/dev/null", {}).ok());
  ASSERT_TRUE(write_file_atomically("/dev/null", "discarded").ok());
  ASSERT_EQ(::lstat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";

  const auto dir = scratch("fifo");
  const fs::path fifo = dir / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_TRUE(check_output_file("--out", fifo, {}).ok());
  std::string received;
  std::thread reader([&] { received = read(fifo); });
  bool replaced = true;
  const Status written = write_file_atomically(fifo, "through the pipe", &replaced);
  reader.join();
  ASSERT_TRUE(written.ok()) << written.error().message;
  EXPECT_FALSE(replaced);
  EXPECT_EQ(received, "through the pipe");
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  fs::remove_all(dir);
}

TEST(Paths, ALinkLeadsToTheFileWrittenAndStays) {
  const auto dir = scratch("link");
  std::ofstream(dir / "real.json") << "old";
  fs::create_symlink("real.json", dir / "link.json");
  ASSERT_TRUE(check_output_file("--out", dir / "link.json", {}).ok());
  ASSERT_TRUE(write_file_atomically(dir / "link.json", "new").ok());
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  EXPECT_EQ(read(dir / "real.json"), "new");

  fs::create_symlink(dir / "absent.json", dir / "dangling.json");
  for (const Status& st : {check_output_file("--out", dir / "dangling.json", {}),
                           write_file_atomically(dir / "dangling.json", "x")}) {
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(st.error().message.find("which does not exist"), std::string::npos)
        << st.error().message;
  }
  EXPECT_FALSE(fs::exists(dir / "absent.json"));
  fs::create_directory(dir / "folder");
  fs::create_symlink("folder", dir / "to-folder");
  const Status to_folder = write_file_atomically(dir / "to-folder", "x");
  ASSERT_FALSE(to_folder.ok());
  EXPECT_NE(to_folder.error().message.find("is a folder"), std::string::npos);
  EXPECT_TRUE(fs::is_symlink(dir / "to-folder"));
  fs::remove_all(dir);
}

TEST(Paths, SocketsAndBlockDevicesAreRefused) {
  const auto dir = scratch("socket");
  const fs::path sock = dir / "s.sock";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = sock.string();
  ASSERT_LT(name.size(), sizeof addr.sun_path);
  std::copy(name.begin(), name.end(), addr.sun_path);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  const Status st = write_file_atomically(sock, "x");
  ::close(fd);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("is a socket"), std::string::npos) << st.error().message;
  EXPECT_TRUE(fs::is_socket(sock));
  fs::remove_all(dir);
  for (const auto& e : fs::directory_iterator("/dev")) {
    if (!e.is_block_file()) continue;
    const Status blk = check_output_file("--out", e.path(), {});
    ASSERT_FALSE(blk.ok()) << e.path();
    EXPECT_NE(blk.error().message.find("is a block device"), std::string::npos);
    return;
  }
  GTEST_SKIP() << "no block device under /dev to check the refusal on";
}

TEST(Paths, AReplacedFileKeepsItsMode) {
  const auto dir = scratch("mode");
  std::ofstream(dir / "a.json") << "old";
  fs::permissions(dir / "a.json", fs::perms::owner_read | fs::perms::owner_write);
  ASSERT_TRUE(write_file_atomically(dir / "a.json", "new").ok());
  EXPECT_EQ(fs::status(dir / "a.json").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  fs::remove_all(dir);
}

// A link planted where a predictable temporary name would be is never followed, and two
// temporaries never share a name.
TEST(Paths, TemporariesAreUnpredictableAndNeverFollowLinks) {
  const auto dir = scratch("planted");
  std::ofstream(dir / "victim") << "precious";
  for (const std::string& name :
       std::vector<std::string>{"a.json.tmp-" + std::to_string(::getpid()), "a.json.tmp"}) {
    fs::create_symlink(dir / "victim", dir / name);
  }
  ASSERT_TRUE(write_file_atomically(dir / "a.json", "output").ok());
  EXPECT_EQ(read(dir / "victim"), "precious");
  EXPECT_EQ(read(dir / "a.json"), "output");
  EXPECT_FALSE(fs::is_symlink(dir / "a.json"));

  auto one = create_temporary(dir, "t-");
  auto two = create_temporary(dir, "t-");
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_NE(one->path, two->path);
  EXPECT_EQ(one->path.filename().string().size(), std::string("t-").size() + 12);
  EXPECT_EQ(fs::status(one->path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  ::close(one->fd);
  ::close(two->fd);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hexi
