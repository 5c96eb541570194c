// validate_program on hand-made programs: unmatched transfers, incomplete or
// misordered collectives and dependency cycles are bad input naming the op ids.

#include "scheduler/program/program.hpp"

#include <gtest/gtest.h>

#include "scheduler/plan/testing.hpp"
#include "scheduler/program/lower.hpp"

namespace hexi {
namespace {

// A two-device program built op by op.
class Builder {
 public:
  Builder() {
    p_.num_devices = 2;
    p_.global_batch = 1;
    p_.seq_len = 1;
    p_.shapes.push_back({});
    p_.groups.push_back({GroupKind::kTp, {0, 1}, {}});
  }
  int compute(int device, std::vector<int> deps = {}) {
    Op op;
    op.kind = OpKind::kCompute;
    op.shape = 0;
    return add(device, op, deps);
  }
  int send(int device, int peer, int tag, std::vector<int> deps = {}) {
    return p2p(OpKind::kSend, device, peer, tag, deps);
  }
  int recv(int device, int peer, int tag, std::vector<int> deps = {}) {
    return p2p(OpKind::kRecv, device, peer, tag, deps);
  }
  int all_reduce(int device, int instance, std::vector<int> deps = {}, double bytes = 8,
                 Collective collective = Collective::kAllReduce) {
    Op op;
    op.kind = OpKind::kCollective;
    op.collective = collective;
    op.group = 0;
    op.instance = instance;
    op.bytes = bytes;
    return add(device, op, deps);
  }
  Status validate() {
    Program p = p_;
    p.ops.clear();
    p.dep_ids.clear();
    for (int d = 0; d < 2; ++d) {
      DeviceLayout l;
      l.device = d;
      l.op_begin = p.num_ops();
      for (auto& [op, deps] : ops_[d]) {
        op.deps_begin = static_cast<std::uint32_t>(p.dep_ids.size());
        for (int x : deps) p.dep_ids.push_back(x + l.op_begin);  // local indices
        op.deps_count = static_cast<std::uint32_t>(deps.size());
        p.ops.push_back(op);
      }
      l.op_end = p.num_ops();
      p.devices.push_back(l);
    }
    program_ = p;
    return validate_program(p, "test.json");
  }
  const Program& program() const { return program_; }

 private:
  int p2p(OpKind kind, int device, int peer, int tag, const std::vector<int>& deps) {
    Op op;
    op.kind = kind;
    op.stream = Stream::kP2p;
    op.peer = peer;
    op.tag = tag;
    op.bytes = 4;
    return add(device, op, deps);
  }
  int add(int device, Op op, const std::vector<int>& deps) {
    op.device = device;
    ops_[device].emplace_back(op, deps);
    return static_cast<int>(ops_[device].size()) - 1;  // local index
  }

  Program p_, program_;
  std::vector<std::pair<Op, std::vector<int>>> ops_[2];
};

TEST(ValidateProgram, MatchedExchangeIsValid) {
  Builder b;
  int c0 = b.compute(0);
  b.send(0, 1, 0, {c0});
  int r1 = b.recv(1, 0, 0);
  b.compute(1, {r1});
  Status st = b.validate();
  EXPECT_TRUE(st.ok()) << st.error().message;
}

TEST(ValidateProgram, UnmatchedSendNamesTheOp) {
  Builder b;
  b.send(0, 1, 7);
  Status st = b.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(st.error().message.find("unmatched send: op 0"), std::string::npos)
      << st.error().message;
  EXPECT_NE(st.error().message.find("tag 7"), std::string::npos);
}

TEST(ValidateProgram, RecvBeforeSendOnBothSidesIsACycle) {
  // Each device receives first and sends what it computed from the receive: a
  // rendezvous deadlock (the classic blocking exchange).
  Builder b;
  int r0 = b.recv(0, 1, 0);
  b.send(0, 1, 0, {r0});
  int r1 = b.recv(1, 0, 0);
  b.send(1, 0, 0, {r1});
  Status st = b.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("dependency cycle: op 0+3 -> op 1+2 -> op 0+3"),
            std::string::npos)
      << st.error().message;
}

TEST(ValidateProgram, DepCycleThroughComputeNamesOps) {
  Builder b;
  b.compute(0, {1});
  b.compute(0, {});
  Status st = b.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("dependency cycle"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("op 0"), std::string::npos);
  EXPECT_NE(st.error().message.find("op 1"), std::string::npos);
}

TEST(ValidateProgram, IncompleteCollectiveNamesTheMissingDevice) {
  Builder b;
  b.all_reduce(0, 0);
  Status st = b.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("incomplete collective: op 0"), std::string::npos)
      << st.error().message;
  EXPECT_NE(st.error().message.find("device(s) 1"), std::string::npos);
}

TEST(ValidateProgram, CollectivesInDifferentOrdersAreRejected) {
  Builder b;
  b.all_reduce(0, 1);
  b.all_reduce(0, 0);
  b.all_reduce(1, 0);
  b.all_reduce(1, 1);
  Status st = b.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("op 1 "), std::string::npos) << st.error().message;
}

// The members of one collective instance run one collective of one size: a member that
// disagrees on either is refused, naming the instance.
TEST(ValidateProgram, MembersOfACollectiveMustAgreeOnItAndItsSize) {
  for (bool size : {true, false}) {
    Builder b;
    b.all_reduce(0, 0);
    if (size) {
      b.all_reduce(1, 0, {}, 16);
    } else {
      b.all_reduce(1, 0, {}, 8, Collective::kAllGather);
    }
    Status st = b.validate();
    ASSERT_FALSE(st.ok()) << size;
    EXPECT_NE(st.error().message.find("of instance 0 on group 0 disagree on the collective or its "
                                      "size"),
              std::string::npos)
        << st.error().message;
  }
  Builder same;
  same.all_reduce(0, 0, {}, 16);
  same.all_reduce(1, 0, {}, 16);
  EXPECT_TRUE(same.validate().ok());
}

TEST(ValidateProgram, ReaderRejectsBadFieldsWithJsonPaths) {
  Cluster c = testing::make_cluster(1, 2);
  Model m = testing::tiny_model();
  auto p = lower_plan(testing::uniform_plan(1, 2, 1, 4, 2), c, m, testing::tiny_training(2), {},
                      "<plan>");
  ASSERT_TRUE(p.ok());
  Json j = to_json(*p);
  j["devices"][1]["ops"][0]["peer"] = -3;
  auto back = program_from_json(j, "prog.json");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().message.find("prog.json: /devices/1/ops/0/peer"), std::string::npos)
      << back.error().message;
  // A kernel shape is [m, n, k] of numbers >= 0.
  Json shape = to_json(*p);
  shape["shapes"][0]["kernels"][0]["shape"] = {1, 2};
  auto bad_shape = program_from_json(shape, "prog.json");
  ASSERT_FALSE(bad_shape.ok());
  EXPECT_NE(bad_shape.error().message.find("/shapes/0/kernels/0/shape"), std::string::npos)
      << bad_shape.error().message;
  // Zeros are numbers >= 0 ([0, n, 0]: only n known): written and read back as they were.
  shape["shapes"][0]["kernels"][0]["shape"] = {0, 5, 0};
  auto zeros = program_from_json(shape, "prog.json");
  ASSERT_TRUE(zeros.ok()) << zeros.error().message;
  const Kernel& kernel = zeros->shapes[0].kernels[0];
  EXPECT_EQ(kernel.m, 0);
  EXPECT_EQ(kernel.n, 5);
  EXPECT_EQ(kernel.k, 0);
  EXPECT_EQ(to_json(*zeros)["shapes"][0]["kernels"][0]["shape"], Json({0, 5, 0}));
  // Retagging a recv leaves its send unmatched.
  Json k = to_json(*p);
  ASSERT_EQ(k["devices"][1]["ops"][0]["op"], "recv");
  k["devices"][1]["ops"][0]["tag"] = 99;
  auto missing = program_from_json(k, "prog.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(missing.error().message.find("unmatched send: op "), std::string::npos)
      << missing.error().message;
}

}  // namespace
}  // namespace hexi
