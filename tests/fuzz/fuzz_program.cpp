// libFuzzer target: program files (program_from_json, which validates). A loaded program
// round-trips (program_text -> program_from_json -> program_text, same bytes), and its
// ops can be labelled and ordered (what the simulator and the engine do first).

#include "scheduler/program/program.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  auto program = program_from_json(*json, fuzz::kOrigin);
  if (!program) return 0;
  const std::string first = program_text(*program);
  auto reread =
      program_from_json(fuzz::reparse(first, "a written program is not JSON"), fuzz::kOrigin);
  fuzz::check_same_bytes(first,
                         program_text(fuzz::must(reread, "a written program does not read back")),
                         "program round trip");
  for (int id = 0; id < program->num_ops(); ++id) (void)op_label(*program, id);
  (void)stream_predecessors(*program);
  return 0;
}
