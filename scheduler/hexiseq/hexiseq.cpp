#include "scheduler/hexiseq/hexiseq.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "scheduler/hexiseq/tensor_layouts.hpp"
#include "topologies/text.hpp"

namespace hexi {
inline namespace hexiseq {
namespace {

// The programs count time in ms and memory in GiB: coefficients near 1 for the solvers'
// absolute tolerances.
constexpr double kMs = 1e3;
// Integer programs per group and round, each linearised at the previous one's answer; the
// passes stop once one gains less than kPassGain of the group's model time over the best
// before (the 16-GPU groups of the shipped 32- and 64-GPU mixes move by 0.04-0.5 % a pass
// after the first, at 10-100 ms a program).
constexpr int kPasses = 4;
constexpr double kPassGain = 0.005;

int add_continuous(Problem& p, const std::string& name, double objective = 0) {
  return p.add_variable({name, 0, kInfinity, false, objective});
}

int add_integer(Problem& p, const std::string& name, double upper) {
  return p.add_variable({name, 0, upper, true, 0});
}

// sum_j w_j v_j over j != i (the all-to-all's sums against the guess).
double others(const std::vector<double>& v, const std::vector<std::vector<double>>& w, int i,
              bool row) {
  double sum = 0;
  for (std::size_t j = 0; j < v.size(); ++j) {
    if (static_cast<int>(j) != i) sum += v[j] * (row ? w[i][j] : w[j][i]);
  }
  return sum;
}

// sum over devices off machine entry m of v.
double off_machine(const GroupTerms& t, const std::vector<double>& v, int m) {
  double sum = 0;
  for (std::size_t j = 0; j < v.size(); ++j) {
    if (t.devices[j].machine != t.machines[m]) sum += v[j];
  }
  return sum;
}

std::vector<double> q_of(const GroupGuess& g) {
  std::vector<double> q;
  for (std::size_t i = 0; i < g.heads.size(); ++i) q.push_back(g.heads[i] + 2 * g.kv[i]);
  return q;
}

// The per-group time variables and the constraints every device of a group shares:
// t >= a_i + tau_i s_i + (2 + replay)(A1 + A2 + 2 lat) + (1 + replay) Rf + Rb.
struct GroupVars {
  int a1 = 0, a2 = 0, rf = 0, rb = 0;
};

GroupVars add_group_vars(Problem& p, const std::string& prefix) {
  return {add_continuous(p, prefix + "A1"), add_continuous(p, prefix + "A2"),
          add_continuous(p, prefix + "Rf"), add_continuous(p, prefix + "Rb")};
}

// t - tau s - ... >= a + const, with the shard term given as (variable, coefficient).
void add_device_time(Problem& p, const LinearModel& lm, const GroupTerms& gt, int i, int t,
                     Term shard, const GroupVars& v) {
  const double rp = lm.replay();
  const double lat = gt.devices.size() > 1 ? 2 * gt.a2a_latency_s : 0.0;
  p.add_constraint(
      {"time" + std::to_string(i),
       {{t, 1}, shard, {v.a1, -(2 + rp)}, {v.a2, -(2 + rp)}, {v.rf, -(1 + rp)}, {v.rb, -1}},
       Sense::kGreaterEqual,
       kMs * (gt.devices[i].token_fixed_s + (2 + rp) * lat)});
}

// var - sum terms >= rhs.
void add_at_least(Problem& p, const std::string& name, int var, std::vector<Term> terms,
                  double rhs = 0) {
  for (auto& term : terms) term.coefficient = -term.coefficient;
  terms.push_back({var, 1});
  p.add_constraint({name, std::move(terms), Sense::kGreaterEqual, rhs});
}

// Drops every constraint equal, term for term and bit for bit, to an earlier one (the rows of
// interchangeable devices at one guess): the same feasible set in fewer rows.
void drop_repeated_rows(Problem& p) {
  std::set<std::tuple<Sense, double, std::vector<std::pair<int, double>>>> seen;
  std::vector<Constraint> kept;
  for (Constraint& c : p.constraints) {
    std::vector<std::pair<int, double>> terms;
    for (const Term& t : c.terms) terms.emplace_back(t.variable, t.coefficient);
    if (seen.emplace(c.sense, c.rhs, std::move(terms)).second) kept.push_back(std::move(c));
  }
  p.constraints = std::move(kept);
}

// A linear expression standing for a sum of products, and its constant.
struct Linearised {
  std::vector<Term> terms;
  double rhs = 0;  // of "var - terms >= rhs"
};

// w s q with s = b x (tokens) and q = h (+ 2 kv when kv >= 0), to first order at (s0, q0):
// w (s0 q + s q0 - s0 q0). Exact where either factor keeps its guess.
void product(Linearised& l, double w, int x, double s0, int h, int kv, double q0, double b) {
  l.terms.push_back({h, w * s0});
  if (kv >= 0) l.terms.push_back({kv, 2 * w * s0});
  l.terms.push_back({x, w * b * q0});
  l.rhs -= w * s0 * q0;
}

}  // namespace

std::optional<std::int64_t> token_block(std::int64_t sequence, int devices,
                                        std::int64_t requested) {
  if (sequence <= 0 || sequence % 2 != 0) return std::nullopt;
  if (requested > 0) {
    if (requested % 2 != 0 || sequence % requested != 0) return std::nullopt;
    return requested;
  }
  std::int64_t block = 2;
  while (sequence % (2 * block) == 0 && 2 * block * 32 * std::max(devices, 1) <= sequence) {
    block *= 2;
  }
  return block;
}

std::vector<std::int64_t> round_blocks(const std::vector<double>& t, std::int64_t total) {
  const std::size_t n = t.size();
  if (total < static_cast<std::int64_t>(n)) return {};
  std::vector<std::int64_t> out(n);
  std::int64_t sum = 0;
  for (std::size_t g = 0; g < n; ++g) {
    out[g] = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(t[g] + 1e-9)));
    sum += out[g];
  }
  // A group's time grows about in proportion to its blocks: each block left goes where it
  // raises blocks / T the least (ties to the lower index), each block too many leaves where
  // removing it lowers that the most.
  auto ratio = [&](std::size_t g, std::int64_t blocks) {
    return static_cast<double>(blocks) / std::max(t[g], 1e-9);
  };
  for (; sum < total; ++sum) {
    std::size_t best = 0;
    for (std::size_t g = 1; g < n; ++g) {
      if (ratio(g, out[g] + 1) < ratio(best, out[best] + 1)) best = g;
    }
    ++out[best];
  }
  for (; sum > total; --sum) {
    std::size_t worst = n;
    for (std::size_t g = 0; g < n; ++g) {
      if (out[g] > 1 && (worst == n || ratio(g, out[g]) > ratio(worst, out[worst]))) worst = g;
    }
    --out[worst];
  }
  return out;
}

GroupGuess proportional_guess(const LinearModel& lm, const GroupTerms& terms, double tokens) {
  const int n = static_cast<int>(terms.devices.size());
  double speed = 0, rate = 0;
  for (const auto& d : terms.devices) {
    speed += 1 / (d.attention_s + d.attention_backward_s);
    rate += 1 / d.token_s;
  }
  GroupGuess g;
  const double heads = lm.cost().attention().q_heads;
  for (int i = 0; i < n; ++i) {
    g.shards.push_back(tokens / terms.devices[i].token_s / rate);
    const DeviceTerms& d = terms.devices[i];
    g.heads.push_back(heads / (d.attention_s + d.attention_backward_s) / speed);
    g.kv.push_back(g.heads.back() / lm.heads_per_kv());
  }
  return g;
}

GroupGuess guess_of(const LinearModel& lm, const SequenceGroup& g) {
  GroupGuess out;
  const std::vector<int> kv = group_kv_heads(lm.cost().attention(), g.heads);
  for (int i = 0; i < g.size(); ++i) {
    out.shards.push_back(static_cast<double>(g.shards[i]));
    out.heads.push_back(g.heads[i]);
    out.kv.push_back(kv[i]);
  }
  return out;
}

namespace {

// split_tokens' linear program, in named steps: per group its blocks variable T_g, its
// ring's longest group Tmax, its time variables, then each device's rows and each machine's
// NIC rows (linear in T_g with the shard fractions and heads at their guesses); the groups'
// tokens summing to the sequence; solved.
class TokenProgram {
 public:
  TokenProgram(const LinearModel& lm, const std::vector<GroupTerms>& terms,
               const std::vector<int>& counts, const std::vector<GroupGuess>& guesses,
               std::int64_t block)
      : lm_(lm),
        terms_(terms),
        counts_(counts),
        guesses_(guesses),
        b_(static_cast<double>(block)),
        S_(static_cast<double>(lm.sequence())),
        gamma_(lm.grad_ratio()),
        has_ring_(std::accumulate(counts.begin(), counts.end(), 0) > 1) {}

  std::optional<std::vector<double>> solve(const HexiSeqOptions& options, double* model_s) {
    t_ = add_continuous(p_, "t", 1);
    tmax_ = add_continuous(p_, "Tmax");
    Constraint sum{"tokens", {}, Sense::kEqual, S_ / b_};
    const int groups = static_cast<int>(terms_.size());
    for (int g = 0; g < groups; ++g) add_group(g, sum);
    p_.add_constraint(sum);
    drop_repeated_rows(p_);
    const Solution s = hexi::solve(p_, options.backend, options.solver_time_limit_s);
    if (!s.has_values()) return std::nullopt;
    std::vector<double> tokens;
    for (int g = 0; g < groups; ++g) tokens.push_back(s.values[tg_[g]]);
    if (model_s) *model_s = s.objective / kMs;
    return tokens;
  }

 private:
  // What a group's rows share: its prefix, time variables, shard fractions sigma_i (shard /
  // T_g) and q_i (heads + 2 kv) at the guess.
  struct Group {
    int g = 0;
    std::string pre;
    GroupVars v;
    std::vector<double> frac, q;
  };

  void add_group(int g, Constraint& sum) {
    Group c{g, "g" + std::to_string(g) + ".", {}, {}, {}};
    tg_.push_back(p_.add_variable({c.pre + "T", 0, S_ / b_, false, 0}));
    sum.terms.push_back({tg_[g], static_cast<double>(counts_[g])});
    if (has_ring_) add_at_least(p_, c.pre + "Tmax", tmax_, {{tg_[g], 1}});
    const GroupTerms& gt = terms_[g];
    const GroupGuess& gs = guesses_[g];
    c.v = add_group_vars(p_, c.pre);
    const int n = static_cast<int>(gt.devices.size());
    double total = 0;
    for (double s : gs.shards) total += s;
    for (double s : gs.shards) c.frac.push_back(total > 0 ? s / total : 1.0 / n);
    c.q = q_of(gs);
    for (int i = 0; i < n; ++i) add_device(c, i);
    for (int m = 0; m < static_cast<int>(gt.machines.size()); ++m) add_machine(c, m);
  }

  void add_device(const Group& c, int i) {
    const int g = c.g;
    const GroupTerms& gt = terms_[g];
    const GroupGuess& gs = guesses_[g];
    const GroupVars& v = c.v;
    const std::vector<double>& frac = c.frac;
    const double b = b_, S = S_;
    const DeviceTerms& d = gt.devices[i];
    const std::string di = c.pre + std::to_string(i);
    add_device_time(p_, lm_, gt, i, t_, {tg_[g], -kMs * d.token_s * frac[i] * b}, v);
    // All-to-all ports (linear in T_g for fixed fractions and heads).
    add_at_least(p_, di + "qkv.in", v.a1,
                 {{tg_[g], kMs * b * c.q[i] * others(frac, gt.pair_s, i, false)}});
    add_at_least(p_, di + "qkv.out", v.a1,
                 {{tg_[g], kMs * b * frac[i] * others(c.q, gt.pair_s, i, true)}});
    add_at_least(p_, di + "o.out", v.a2,
                 {{tg_[g], kMs * b * gs.heads[i] * others(frac, gt.pair_s, i, true)}});
    add_at_least(p_, di + "o.in", v.a2,
                 {{tg_[g], kMs * b * frac[i] * others(gs.heads, gt.pair_s, i, false)}});
    // Ring: compute, and the K/V receive of the other groups' tokens.
    add_at_least(p_, di + "ring.f", v.rf, {{tg_[g], kMs * d.attention_s * b * gs.heads[i]}});
    add_at_least(p_, di + "ring.b", v.rb,
                 {{tg_[g], kMs * d.attention_backward_s * b * gs.heads[i]}});
    const double ring = kMs * gt.ring_s[i] * gs.kv[i];
    add_at_least(p_, di + "kv.f", v.rf, {{tg_[g], -b * ring}}, S * ring);
    add_at_least(p_, di + "kv.b", v.rb, {{tg_[g], -b * ring}}, S * (1 + gamma_) * ring);
    // Memory (GiB).
    p_.add_constraint({di + "memory",
                       {{tg_[g], (d.memory_token * frac[i] * b +
                                  lm_.memory_ulysses() * b * (2 * gs.heads[i] + 2 * gs.kv[i])) /
                                     kGiB},
                        {tmax_, lm_.memory_ring() * b * gs.kv[i] / kGiB}},
                       Sense::kLessEqual,
                       (d.memory_limit - d.memory_fixed) / kGiB});
  }

  // Machine entry m's NIC: the all-to-alls' off-machine traffic, and the ring's K/V.
  void add_machine(const Group& c, int m) {
    const int g = c.g;
    const GroupTerms& gt = terms_[g];
    const GroupGuess& gs = guesses_[g];
    const std::vector<double>& frac = c.frac;
    const std::vector<double>& q = c.q;
    const int n = static_cast<int>(gt.devices.size());
    const double b = b_, S = S_;
    const double nic = kMs * gt.nic_s[m] * b;
    double out_qkv = 0, in_qkv = 0, out_o = 0, in_o = 0, kv = 0;
    for (int i = 0; i < n; ++i) {
      if (gt.devices[i].machine != gt.machines[m]) continue;
      out_qkv += frac[i] * off_machine(gt, q, m);
      in_qkv += q[i] * off_machine(gt, frac, m);
      out_o += gs.heads[i] * off_machine(gt, frac, m);
      in_o += frac[i] * off_machine(gt, gs.heads, m);
      kv += gs.kv[i];
    }
    if (gt.machines.size() > 1) {
      const std::string dm = c.pre + "nic" + std::to_string(m);
      add_at_least(p_, dm + ".qkv", c.v.a1, {{tg_[g], nic * std::max(out_qkv, in_qkv)}});
      add_at_least(p_, dm + ".o", c.v.a2, {{tg_[g], nic * std::max(out_o, in_o)}});
    }
    if (gt.ring_nic[m]) {
      const double ring = 2 * kMs * gt.nic_s[m] * kv;
      add_at_least(p_, c.pre + "ringnic.f", c.v.rf, {{tg_[g], -b * ring}}, S * ring);
      add_at_least(p_, c.pre + "ringnic.b", c.v.rb, {{tg_[g], -b * ring}}, S * (1 + gamma_) * ring);
    }
  }

  const LinearModel& lm_;
  const std::vector<GroupTerms>& terms_;
  const std::vector<int>& counts_;
  const std::vector<GroupGuess>& guesses_;
  const double b_, S_;   // the block and the sequence (tokens)
  const double gamma_;   // LinearModel::grad_ratio
  const bool has_ring_;  // more than one group
  Problem p_;
  int t_ = 0, tmax_ = 0;
  std::vector<int> tg_;  // per group: its T_g (blocks)
};

}  // namespace

std::optional<std::vector<double>> split_tokens(const LinearModel& lm,
                                                const std::vector<GroupTerms>& terms,
                                                const std::vector<int>& counts,
                                                const std::vector<GroupGuess>& guesses,
                                                std::int64_t block, const HexiSeqOptions& options,
                                                double* model_s) {
  return TokenProgram(lm, terms, counts, guesses, block).solve(options, model_s);
}

// The guess averaged over each class of interchangeable ranks (the program is then
// symmetric in them, and ordering them loses nothing).
GroupGuess symmetric(const GroupGuess& g, const std::vector<int>& classes) {
  GroupGuess out = g;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    if (classes[c] != static_cast<int>(c)) continue;
    double s = 0, h = 0, kv = 0, n = 0;
    for (std::size_t i = 0; i < classes.size(); ++i) {
      if (classes[i] != static_cast<int>(c)) continue;
      s += g.shards[i], h += g.heads[i], kv += g.kv[i], n += 1;
    }
    for (std::size_t i = 0; i < classes.size(); ++i) {
      if (classes[i] != static_cast<int>(c)) continue;
      out.shards[i] = s / n, out.heads[i] = h / n, out.kv[i] = kv / n;
    }
  }
  return out;
}

namespace {

// solve_group's integer program, in named steps: per device its blocks x_i, heads h_i and
// kv heads kv_i (covering its heads: whole GQA groups, or any kv head its heads touch); the
// symmetry rows of interchangeable ranks; per device its time, all-to-all ports, ring and
// memory; per machine its NICs' all-to-all and ring traffic (products of shards and heads
// to first order at the guess); solved, the heads aligned to kv boundaries.
class GroupProgram {
 public:
  GroupProgram(const LinearModel& lm, const GroupTerms& gt, const std::vector<int>& devices,
               std::int64_t tokens, std::int64_t ring_block, const GroupGuess& asked,
               std::int64_t block)
      : lm_(lm),
        gt_(gt),
        devices_(devices),
        tokens_(tokens),
        ring_block_(ring_block),
        block_(block),
        classes_(interchangeable(gt)),
        guess_(symmetric(asked, classes_)),
        q_(q_of(guess_)),
        n_(static_cast<int>(devices.size())),
        r_(lm.heads_per_kv()),
        b_(static_cast<double>(block)),
        T_(static_cast<double>(tokens)) {
    const double S = static_cast<double>(lm.sequence());
    const double gamma = lm.grad_ratio();
    fwd_tokens_ = S - T_;
    bwd_tokens_ = (S - T_) * (1 + gamma) + T_ * gamma;
  }

  GroupAnswer solve(const HexiSeqOptions& options, double cutoff_s) {
    t_ = add_continuous(p_, "t", 1);
    v_ = add_group_vars(p_, "");
    add_shares(options.split_kv_heads);
    add_symmetry();
    for (int i = 0; i < n_; ++i) add_device(i);
    for (int m = 0; m < static_cast<int>(gt_.machines.size()); ++m) add_machine(m);
    p_.relative_gap = options.mip_gap;
    p_.node_limit = options.mip_node_limit;
    p_.node_limit_gap = options.mip_node_limit_gap;
    p_.cutoff = kMs * cutoff_s;
    const Solution s = hexi::solve(p_, options.backend, options.solver_time_limit_s);
    if (s.status == SolveStatus::kCutOff) return {std::nullopt, s.bound / kMs};
    if (!s.has_values()) return {};
    SequenceGroup g{devices_, tokens_, {}, {}};
    for (int i = 0; i < n_; ++i) {
      g.shards.push_back(block_ * std::llround(s.values[x_[i]]));
      g.heads.push_back(static_cast<int>(std::lround(s.values[h_[i]])));
    }
    align_heads(g, r_);
    return {std::move(g)};
  }

 private:
  // x_i, h_i, kv_i of every device, the tokens and heads they share out.
  void add_shares(bool split_kv_heads) {
    const int nq = lm_.cost().attention().q_heads, nkv = lm_.cost().attention().kv_heads;
    Constraint all_tokens{"tokens", {}, Sense::kEqual, T_ / b_};
    Constraint all_heads{"heads", {}, Sense::kEqual, static_cast<double>(nq)};
    for (int i = 0; i < n_; ++i) {
      const std::string di = std::to_string(i);
      x_.push_back(add_integer(p_, "x" + di, T_ / b_));
      h_.push_back(add_integer(p_, "h" + di, nq));
      kv_.push_back(add_integer(p_, "kv" + di, nkv));
      all_tokens.terms.push_back({x_[i], 1});
      all_heads.terms.push_back({h_[i], 1});
      if (split_kv_heads) {
        const int used = p_.add_variable({"u" + di, 0, 1, true, 0});
        add_at_least(p_, "kv.cover" + di, kv_[i], {{h_[i], 1.0 / r_}});
        add_at_least(p_, "kv.one" + di, kv_[i], {{used, 1}});
        add_at_least(p_, "used" + di, used, {{h_[i], 1.0 / nq}});
      } else {
        p_.add_constraint(
            {"kv.whole" + di, {{h_[i], 1}, {kv_[i], -static_cast<double>(r_)}}, Sense::kEqual, 0});
      }
    }
    p_.add_constraint(all_tokens);
    p_.add_constraint(all_heads);
  }

  // Symmetry: each interchangeable rank at least the next one of its class, (heads, shard)
  // lexicographically.
  void add_symmetry() {
    for (int i = 0; i < n_; ++i) {
      for (int j = i + 1; j < n_; ++j) {
        if (classes_[j] != classes_[i]) continue;
        const double lex = T_ / b_ + 1;
        p_.add_constraint({"order" + std::to_string(i),
                           {{h_[i], lex}, {x_[i], 1}, {h_[j], -lex}, {x_[j], -1}},
                           Sense::kGreaterEqual,
                           0});
        break;
      }
    }
  }

  // The all-to-all's bytes s_j q_i, first order at the guess (both factors may move).
  void qkv(Linearised& l, double w, int from, int to) const {
    product(l, w, x_[from], guess_.shards[from], h_[to], kv_[to], q_[to], b_);
  }
  void out(Linearised& l, double w, int from, int to) const {
    product(l, w, x_[from], guess_.shards[from], h_[to], -1, guess_.heads[to], b_);
  }

  void add_device(int i) {
    const DeviceTerms& d = gt_.devices[i];
    const std::string di = std::to_string(i);
    add_device_time(p_, lm_, gt_, i, t_, {x_[i], -kMs * d.token_s * b_}, v_);
    Linearised recv_qkv, send_qkv, send_o, recv_o;
    for (int j = 0; j < n_; ++j) {
      if (j == i) continue;
      qkv(recv_qkv, kMs * gt_.pair_s[j][i], j, i);  // j's tokens of i's heads
      qkv(send_qkv, kMs * gt_.pair_s[i][j], i, j);
      out(send_o, kMs * gt_.pair_s[i][j], j, i);  // i's heads of j's tokens
      out(recv_o, kMs * gt_.pair_s[j][i], i, j);
    }
    add_at_least(p_, "qkv.in" + di, v_.a1, recv_qkv.terms, recv_qkv.rhs);
    add_at_least(p_, "qkv.out" + di, v_.a1, send_qkv.terms, send_qkv.rhs);
    add_at_least(p_, "o.out" + di, v_.a2, send_o.terms, send_o.rhs);
    add_at_least(p_, "o.in" + di, v_.a2, recv_o.terms, recv_o.rhs);
    add_at_least(p_, "ring.f" + di, v_.rf, {{h_[i], kMs * d.attention_s * T_}});
    add_at_least(p_, "ring.b" + di, v_.rb, {{h_[i], kMs * d.attention_backward_s * T_}});
    add_at_least(p_, "kv.f" + di, v_.rf, {{kv_[i], kMs * fwd_tokens_ * gt_.ring_s[i]}});
    add_at_least(p_, "kv.b" + di, v_.rb, {{kv_[i], kMs * bwd_tokens_ * gt_.ring_s[i]}});
    p_.add_constraint({"memory" + di,
                       {{x_[i], d.memory_token * b_ / kGiB},
                        {h_[i], lm_.memory_ulysses() * T_ * 2 / kGiB},
                        {kv_[i], (lm_.memory_ulysses() * T_ * 2 +
                                  lm_.memory_ring() * static_cast<double>(ring_block_)) /
                                     kGiB}},
                       Sense::kLessEqual,
                       (d.memory_limit - d.memory_fixed) / kGiB});
  }

  // Machine entry m's NICs: the all-to-alls' off-machine traffic each way, and the ring's.
  void add_machine(int m) {
    const double nic = kMs * gt_.nic_s[m];
    Linearised out_qkv, in_qkv, out_o, in_o;
    std::vector<Term> ring;
    for (int i = 0; i < n_; ++i) {
      if (gt_.devices[i].machine != gt_.machines[m]) continue;
      ring.push_back({kv_[i], 2 * nic});
      for (int j = 0; j < n_; ++j) {
        if (gt_.devices[j].machine == gt_.machines[m]) continue;
        qkv(out_qkv, nic, i, j);
        qkv(in_qkv, nic, j, i);
        out(out_o, nic, j, i);
        out(in_o, nic, i, j);
      }
    }
    const std::string dm = "nic" + std::to_string(m);
    if (gt_.machines.size() > 1) {
      add_at_least(p_, dm + ".qkv.out", v_.a1, out_qkv.terms, out_qkv.rhs);
      add_at_least(p_, dm + ".qkv.in", v_.a1, in_qkv.terms, in_qkv.rhs);
      add_at_least(p_, dm + ".o.out", v_.a2, out_o.terms, out_o.rhs);
      add_at_least(p_, dm + ".o.in", v_.a2, in_o.terms, in_o.rhs);
    }
    if (gt_.ring_nic[m]) {
      std::vector<Term> f = ring, bk = ring;
      for (auto& term : f) term.coefficient *= fwd_tokens_;
      for (auto& term : bk) term.coefficient *= bwd_tokens_;
      add_at_least(p_, dm + ".ring.f", v_.rf, f);
      add_at_least(p_, dm + ".ring.b", v_.rb, bk);
    }
  }

  const LinearModel& lm_;
  const GroupTerms& gt_;
  const std::vector<int>& devices_;
  const std::int64_t tokens_, ring_block_, block_;
  const std::vector<int> classes_;          // interchangeable ranks
  const GroupGuess guess_;                  // the asked guess, symmetric over each class
  const std::vector<double> q_;             // heads + 2 kv at the guess
  const int n_, r_;                         // devices; query heads per kv head
  const double b_, T_;                      // the block and the group's tokens
  double fwd_tokens_ = 0, bwd_tokens_ = 0;  // the other groups' tokens each ring pass receives
  Problem p_;
  int t_ = 0;
  GroupVars v_;
  std::vector<int> x_, h_, kv_;
};

}  // namespace

GroupAnswer solve_group(const LinearModel& lm, const GroupTerms& gt,
                        const std::vector<int>& devices, std::int64_t tokens,
                        std::int64_t ring_block, const GroupGuess& asked, std::int64_t block,
                        const HexiSeqOptions& options, double cutoff_s) {
  return GroupProgram(lm, gt, devices, tokens, ring_block, asked, block).solve(options, cutoff_s);
}

void align_heads(SequenceGroup& g, int r) {
  const int n = g.size();
  std::vector<int> left(n);
  std::iota(left.begin(), left.end(), 0);
  std::vector<int> order;
  int offset = 0;
  // Score of placing device i at `offset`: ends on a boundary > stays inside the current kv
  // group > anything; more heads first; then the lower index.
  auto score = [&](int i) {
    const int h = g.heads[i], o = offset % r;
    if (h == 0) return 0;
    if ((o + h) % r == 0) return 3;
    if (o + h < r) return 2;
    return 1;
  };
  while (!left.empty()) {
    auto best = left.begin();
    for (auto it = left.begin(); it != left.end(); ++it) {
      const int si = score(*it), sb = score(*best);
      if (si > sb || (si == sb && g.heads[*it] > g.heads[*best])) best = it;
    }
    order.push_back(*best);
    offset += g.heads[*best];
    left.erase(best);
  }
  SequenceGroup out{{}, g.tokens, {}, {}};
  for (int i : order) {
    out.devices.push_back(g.devices[i]);
    out.shards.push_back(g.shards[i]);
    out.heads.push_back(g.heads[i]);
  }
  g = std::move(out);
}

namespace {

// Appends the bytes of `v` to `key`: equal bits, equal bytes (what "%.17g" told apart, at a
// fraction of the cost; keys are only compared, never read).
template <class T>
void append_bits(std::string& key, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  key.append(bytes, sizeof(T));
}

}  // namespace

std::string program_key(const GroupTerms& t, std::int64_t tokens, std::int64_t ring_block,
                        const GroupGuess& guess) {
  std::string key;
  key.reserve(8 * (4 + t.devices.size() * (t.devices.size() + 12) + 2 * t.machines.size()));
  for (std::int64_t v : {tokens, ring_block, static_cast<std::int64_t>(t.devices.size()),
                         static_cast<std::int64_t>(t.machines.size())}) {
    append_bits(key, v);
  }
  append_bits(key, t.a2a_latency_s);
  // Machines by their place in the group's list: groups alike on other machines match.
  for (const auto& d : t.devices) {
    const auto entry = std::find(t.machines.begin(), t.machines.end(), d.machine);
    append_bits(key, static_cast<int>(entry - t.machines.begin()));
    for (double v : {d.token_fixed_s, d.token_s, d.attention_s, d.attention_backward_s,
                     d.memory_fixed, d.memory_token, d.memory_limit}) {
      append_bits(key, v);
    }
  }
  for (const auto& row : t.pair_s) {
    for (double v : row) append_bits(key, v);
  }
  for (double v : t.ring_s) append_bits(key, v);
  for (std::size_t m = 0; m < t.machines.size(); ++m) {
    append_bits(key, t.nic_s[m]);
    append_bits(key, t.ring_nic[m]);
  }
  for (const auto* v : {&guess.shards, &guess.heads, &guess.kv}) {
    append_bits(key, static_cast<std::int64_t>(v->size()));
    for (double x : *v) append_bits(key, x);
  }
  return key;
}

namespace {

// One block of tokens from group `a` (its device with the longest shard) to group `b` (its
// device with the shortest); false when `a` has a single block.
bool move_block(SequenceGroup& a, SequenceGroup& b, std::int64_t block) {
  if (a.tokens <= block) return false;
  const auto longest = std::max_element(a.shards.begin(), a.shards.end());
  if (*longest < block) return false;
  *longest -= block;
  a.tokens -= block;
  *std::min_element(b.shards.begin(), b.shards.end()) += block;
  b.tokens += block;
  return true;
}

// The search over one mesh: groupings in, the best closed-form layout out.
class Search {
 public:
  // `planner` is how the search sees the cluster (the cluster itself, or every device
  // alike for hexiseq-homogeneous); `judge` the real cluster, which scores the answer.
  // `bar`: an iteration time (s) found elsewhere that this search's layouts must beat to
  // matter (the whole mesh's best, for the fastest type's mesh); the screen reads it.
  Search(const SequenceCost& judge, const SequenceCost& planner, std::vector<int> devices,
         std::int64_t block, const HexiSeqOptions& options, double bar = kInfinity)
      : judge_(judge),
        planner_(planner),
        lm_(planner, static_cast<int>(devices.size())),
        devices_(std::move(devices)),
        block_(block),
        options_(options),
        bar_(bar),
        start_(std::chrono::steady_clock::now()) {}

  // Every layout score() sees from now on also goes to `out` (nullptr: none).
  void record(std::vector<SequenceLayout>* out) { record_ = out; }

  // Whether groupings are screened by their first LP before their integer programs (large
  // meshes; at_bar).
  void set_screen(bool on) { screen_ = on && options_.lp_screen; }

  double elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  bool out_of_time() const {
    return options_.time_budget_s > 0 && best_ && elapsed_s() > options_.time_budget_s;
  }

  // Scores a grouping (every round); its best closed-form iteration time, or infinity.
  // Groups alike (equal programs but for T and the guess) share one LP entry and guess.
  // A grouping seen before (the descent's second pass tries its first pass's groupings
  // again) is not searched again: the same groups give the same programs and layouts.
  double evaluate(const Grouping& grouping) {
    const auto seen = evaluated_.find(grouping.groups);
    if (seen != evaluated_.end()) return seen->second;
    const double best = search(grouping);
    evaluated_.emplace(grouping.groups, best);
    return best;
  }

  // The LP's optimum for a grouping at proportional guesses (stage 2 alone, continuous
  // heads): a cheap estimate to rank groupings by; infinity when infeasible.
  double estimate(const Grouping& grouping) {
    const Prepared pr = prepare(grouping);
    double model = kInfinity;
    ++solves_;
    if (!split_tokens(lm_, pr.rep_terms, pr.counts, pr.guesses, block_, options_, &model)) {
      return kInfinity;
    }
    return model;
  }

  // Polishes the best layout, and the best the programs found, on the closed form: one
  // block moved from a group (its device with the longest shard) to another (its device
  // with the shortest), kept while the iteration improves; meshes of at most kPolishGroups
  // groups, a few sweeps. The model cannot tell some of these apart (equal model times,
  // different ring hops).
  void polish() {
    std::vector<HexiSeqResult> starts;
    if (best_) starts.push_back(*best_);
    if (best_solved_) starts.push_back(*best_solved_);
    for (const HexiSeqResult& start : starts) {
      if (start.layout.groups.size() > kPolishGroups) continue;
      polish_from(start.layout, start.time.iteration_s, start.grouping);
    }
  }

  Result<HexiSeqResult> finish() {
    if (!best_ && cut_ > 0) {
      return bad_input("hexiseq: no layout of the " + std::to_string(devices_.size()) +
                       " devices beats the " + fixed(bar_, 4) + " s iteration found elsewhere");
    }
    if (!best_) return bad_input(no_fit_message());
    HexiSeqResult out = std::move(*best_);
    out.time = judge_.iteration(out.layout);
    out.candidates = candidates_;
    out.solves = solves_;
    out.search_time_s = elapsed_s();
    out.budget_exhausted = out_of_time();
    return out;
  }

 private:
  // evaluate() for a grouping not seen before.
  double search(const Grouping& grouping) {
    Prepared pr = prepare(grouping);
    const int p = static_cast<int>(grouping.groups.size());
    const std::vector<GroupTerms>& terms = pr.terms;
    const std::vector<int>& cls = pr.cls;
    const std::vector<int>& reps = pr.reps;
    std::vector<GroupGuess>& guesses = pr.guesses;
    // The even split the homogeneous systems run, as a floor for this grouping.
    double best = kInfinity;
    SequenceLayout even = even_layout(grouping.groups, lm_.sequence(), lm_.cost().model().heads);
    even.split_kv_heads = options_.split_kv_heads;
    if (std::all_of(even.groups.begin(), even.groups.end(),
                    [](const SequenceGroup& g) { return g.tokens > 0; }) &&
        (options_.split_kv_heads ||
         validate(even, lm_.cost().model(), lm_.cost().training(), lm_.cost().cluster(), "")
             .ok())) {
      best = score(grouping, even, false);
    }
    const SplitFree fixed = planner_.split_free(even.devices());
    if (at_bar(options_.lp_screen, floor_s(0, fixed))) return best;
    std::vector<std::int64_t> last;
    double ratio = 0;  // the last round's layout: closed form over model, per layer
    for (int round = 0; round < std::max(1, options_.rounds) && !out_of_time(); ++round) {
      ++solves_;
      double model_s = 0;
      const auto t =
          split_tokens(lm_, pr.rep_terms, pr.counts, guesses, block_, options_, &model_s);
      if (!t) break;
      if (round == 0 && at_bar(screen_, floor_s(model_s, fixed))) break;
      if (round > 0 && at_bar(options_.lp_screen, floor_s(ratio * model_s, fixed))) break;
      std::vector<double> per_group;
      for (int g = 0; g < p; ++g) per_group.push_back((*t)[cls[g]]);
      const std::vector<std::int64_t> blocks = round_blocks(per_group, lm_.sequence() / block_);
      if (blocks.empty() || blocks == last) break;  // fewer blocks than groups, or converged
      last = blocks;
      std::vector<GroupGuess> group_guesses;
      for (int g = 0; g < p; ++g) group_guesses.push_back(guesses[cls[g]]);
      double layout_model_s = 0;
      std::optional<SequenceLayout> layout =
          solve_groups(grouping, terms, group_guesses, blocks, fixed, &layout_model_s);
      if (!layout) break;
      const double time = score(grouping, *layout);
      best = std::min(best, time);
      ratio = std::isfinite(time) && layout_model_s > 0 ? per_layer_s(time, fixed) / layout_model_s
                                                        : 0;  // 0: no calibration
      for (std::size_t c = 0; c < reps.size(); ++c) {
        guesses[c] = guess_in_order(layout->groups[reps[c]], grouping.groups[reps[c]]);
      }
    }
    return best;
  }

  void polish_from(SequenceLayout current, double time, const std::string& grouping) {
    const int p = static_cast<int>(current.groups.size());
    for (int sweep = 0; sweep < 3 && !out_of_time(); ++sweep) {
      bool improved = false;
      for (int from = 0; from < p; ++from) {
        for (int to = 0; to < p; ++to) {
          SequenceLayout moved = current;
          if (from == to || !move_block(moved.groups[from], moved.groups[to], block_)) continue;
          const double t = score({grouping, {}}, moved, false);
          if (t < time) time = t, current = std::move(moved), improved = true;
        }
      }
      if (!improved) return;
    }
  }

  // A grouping's groups, their classes (groups alike: equal programs but for T and the
  // guess, one LP entry each) and each class's proportional guess.
  struct Prepared {
    std::vector<GroupTerms> terms;      // per group
    std::vector<int> cls;               // per group: its class
    std::vector<int> reps, counts;      // per class: first group, number of groups
    std::vector<GroupTerms> rep_terms;  // per class
    std::vector<GroupGuess> guesses;    // per class, in its first group's device order
  };

  Prepared prepare(const Grouping& grouping) const {
    Prepared pr;
    const int p = static_cast<int>(grouping.groups.size());
    for (int g = 0; g < p; ++g) {
      pr.terms.push_back(lm_.group(grouping.groups[g],
                                   p > 1 ? grouping.groups[(g + p - 1) % p] : std::vector<int>{}));
    }
    pr.cls.resize(p);
    std::map<std::string, int> by_key;
    for (int g = 0; g < p; ++g) {
      const auto [it, fresh] =
          by_key.emplace(program_key(pr.terms[g], 0, 0, {}), static_cast<int>(pr.reps.size()));
      if (fresh) pr.reps.push_back(g), pr.counts.push_back(0);
      pr.cls[g] = it->second;
      ++pr.counts[pr.cls[g]];
    }
    const double share = static_cast<double>(lm_.sequence()) / static_cast<int>(devices_.size());
    for (int g : pr.reps) {
      pr.rep_terms.push_back(pr.terms[g]);
      pr.guesses.push_back(proportional_guess(lm_, pr.terms[g], share * grouping.groups[g].size()));
    }
    return pr;
  }

  // Stage 3 for every group, each at T_g; an integer program per distinct program.
  // Its programs are cut off where their relaxation says the grouping cannot beat the bar.
  std::optional<SequenceLayout> solve_groups(const Grouping& grouping,
                                             const std::vector<GroupTerms>& terms,
                                             std::vector<GroupGuess> guesses,
                                             const std::vector<std::int64_t>& blocks,
                                             const SplitFree& fixed, double* model_s) {
    const int p = static_cast<int>(grouping.groups.size());
    const double cutoff = cutoff_s(fixed);
    std::int64_t ring_block = 0;
    for (std::int64_t b : blocks) ring_block = std::max(ring_block, b * block_);
    if (p == 1) ring_block = 0;
    SequenceLayout layout;
    layout.split_kv_heads = options_.split_kv_heads;
    for (int g = 0; g < p; ++g) {
      const std::int64_t tokens = blocks[g] * block_;
      // The guess's shards scaled to the new T_g.
      double total = 0;
      for (double s : guesses[g].shards) total += s;
      for (double& s : guesses[g].shards) s *= total > 0 ? static_cast<double>(tokens) / total : 0;
      std::optional<SequenceGroup> best;
      double best_value = kInfinity;
      std::optional<SequenceGroup> previous;
      for (int pass = 0; pass < kPasses; ++pass) {
        auto group =
            solve_once(terms[g], grouping.groups[g], tokens, ring_block, guesses[g], cutoff);
        if (!group ||
            (previous && group->shards == previous->shards && group->heads == previous->heads)) {
          break;  // infeasible, or a fixed point of the linearisation
        }
        previous = group;
        const double value =
            lm_.group_value(terms_in_order(terms[g], grouping.groups[g], *group), *group);
        const bool settled = best && value >= (1 - kPassGain) * best_value;
        if (value < best_value) best_value = value, best = group;
        if (settled) break;
        guesses[g] = guess_in_order(*group, grouping.groups[g]);
      }
      if (!best) return std::nullopt;
      *model_s = std::max(*model_s, best_value);
      layout.groups.push_back(std::move(*best));
    }
    return layout;
  }

  // One integer program, or its memoised answer (groups of one signature repeat); none when
  // infeasible or cut off at `cutoff_s` (a program cut off before at a lower bar is solved
  // again).
  std::optional<SequenceGroup> solve_once(const GroupTerms& terms, const std::vector<int>& devices,
                                          std::int64_t tokens, std::int64_t ring_block,
                                          const GroupGuess& guess, double cutoff_s) {
    // Keyed by the guess the program reads: averaged over interchangeable ranks.
    const std::string key =
        program_key(terms, tokens, ring_block, symmetric(guess, interchangeable(terms)));
    auto it = memo_.find(key);
    if (it == memo_.end() ||
        (it->second.cut_off_s > -kInfinity && it->second.cut_off_s < cutoff_s)) {
      ++solves_;
      GroupAnswer a =
          solve_group(lm_, terms, devices, tokens, ring_block, guess, block_, options_, cutoff_s);
      Memo m;
      if (a.group) m.answer = unaligned(*a.group, devices);
      m.cut_off_s = a.cut_off_s;
      it = memo_.insert_or_assign(key, std::move(m)).first;
    }
    if (it->second.cut_off_s > -kInfinity) ++cut_;
    const auto& answer = it->second.answer;
    if (!answer) return std::nullopt;
    SequenceGroup g{devices, tokens, answer->first, answer->second};
    align_heads(g, lm_.heads_per_kv());
    return g;
  }

  // Shards and heads of an aligned group back in `devices` order.
  static std::pair<std::vector<std::int64_t>, std::vector<int>> unaligned(
      const SequenceGroup& g, const std::vector<int>& devices) {
    std::vector<std::int64_t> shards(devices.size());
    std::vector<int> heads(devices.size());
    for (int i = 0; i < g.size(); ++i) {
      const auto at = std::find(devices.begin(), devices.end(), g.devices[i]) - devices.begin();
      shards[at] = g.shards[i];
      heads[at] = g.heads[i];
    }
    return {shards, heads};
  }

  GroupGuess guess_in_order(const SequenceGroup& g, const std::vector<int>& devices) const {
    const auto [shards, heads] = unaligned(g, devices);
    const GroupGuess aligned = guess_of(lm_, g);
    GroupGuess out;
    for (std::size_t i = 0; i < devices.size(); ++i) {
      const auto at = std::find(g.devices.begin(), g.devices.end(), devices[i]) - g.devices.begin();
      out.shards.push_back(static_cast<double>(shards[i]));
      out.heads.push_back(heads[i]);
      out.kv.push_back(aligned.kv[at]);
    }
    return out;
  }

  // The group's terms with its devices in `g`'s order.
  GroupTerms terms_in_order(const GroupTerms& t, const std::vector<int>& devices,
                            const SequenceGroup& g) const {
    std::vector<int> at;
    for (int d : g.devices)
      at.push_back(
          static_cast<int>(std::find(devices.begin(), devices.end(), d) - devices.begin()));
    GroupTerms out = t;
    for (std::size_t i = 0; i < at.size(); ++i) {
      out.devices[i] = t.devices[at[i]];
      out.ring_s[i] = t.ring_s[at[i]];
      for (std::size_t j = 0; j < at.size(); ++j) out.pair_s[i][j] = t.pair_s[at[i]][at[j]];
    }
    return out;
  }

  // What the closed form puts an iteration at, at least, when the model's layer time is
  // `layer_s`: ZeRO-3's per-layer collectives floor the layer, and what is charged whatever
  // the split (SplitFree, of the grouping's devices in ring order) is added.
  double floor_s(double layer_s, const SplitFree& fixed) const {
    const double layers = planner_.model().layers;
    return static_cast<double>(planner_.training().global_batch) *
               (layers * std::max(layer_s, fixed.layer_floor_s()) + fixed.exposed_s) +
           fixed.sync_s + fixed.optimizer_s;
  }

  // floor_s's inverse: the layer time an iteration of `time_s` stands for.
  double per_layer_s(double time_s, const SplitFree& fixed) const {
    const double batch = static_cast<double>(planner_.training().global_batch);
    return ((time_s - fixed.sync_s - fixed.optimizer_s) / batch - fixed.exposed_s) /
           planner_.model().layers;
  }

  // Whether a floor of the grouping (floor_s) reaches the bar: then the grouping is left
  // (counted as cut). Three floors, with the screen on (`lp_screen`):
  //   - split-free (any mesh): floor_s(0), what every split of the grouping is charged;
  //   - the first LP (large meshes, `screen_`): its optimum at proportional guesses. Not a
  //     proof: the programs could find shards and heads the guess does not see. On the
  //     hexiseq_bench meshes (32-1 024 GPUs) this estimate lies 0.4-35 % below the best layout
  //     the programs find for every grouping, and it skips the merged and dealt groupings of
  //     8-16 devices whose programs cost most (HexiSeqSearch.ScreenKeepsTheLayoutOnALargeMesh:
  //     the same layout with and without);
  //   - calibrated (any mesh, from the second round): the round's LP (at the last round's
  //     shards and heads) times the ratio of the closed form to the model on the last round's
  //     layout. The model misses what the closed form charges uneven rings and shared NICs (on
  //     a 16-GPU group across two machines the closed form's layer is 1.6x the model's), and
  //     that ratio changes little between rounds of one grouping. Not a proof: a round that
  //     moves the split a long way could change it
  //     (HexiSeqSearch.CutoffsKeepTheLayoutOnRandomMeshes).
  bool at_bar(bool on, double floor) {
    if (!on || floor < bar()) return false;
    ++cut_;
    return true;
  }

  // The cutoff of a grouping's integer programs (any mesh, with the screen on): the layer
  // time at which floor_s reaches the bar. A group's layer time bounds the mesh's from below,
  // and a program's LP relaxation bounds the group's in the model. Not a proof: the model
  // lies below the closed form as a rule, not by construction. Infinity without a bar.
  double cutoff_s(const SplitFree& fixed) const {
    if (!options_.lp_screen || !std::isfinite(bar())) return kInfinity;
    return per_layer_s(bar(), fixed);
  }

  // The time a layout must beat to matter: the best found, or the bar from outside.
  double bar() const { return std::min(bar_, best_ ? best_->time.iteration_s : kInfinity); }

  // The closed form of a layout (infinity when it does not fit); keeps the best, and the
  // best the programs `solved`.
  double score(const Grouping& grouping, const SequenceLayout& layout, bool solved = true) {
    ++candidates_;
    if (record_) record_->push_back(layout);
    IterationTime it = planner_.iteration(layout);
    if (!it.fits) {
      if (!closest_ || it.iteration_s < closest_->iteration_s) closest_ = it;
      return kInfinity;
    }
    const double t = it.iteration_s;
    if (solved && (!best_solved_ || t < best_solved_->time.iteration_s)) {
      best_solved_ = HexiSeqResult{layout, it, grouping.name};
    }
    if (!best_ || t < best_->time.iteration_s) {
      best_ = HexiSeqResult{layout, std::move(it), grouping.name};
    }
    return t;
  }

  std::string no_fit_message() const {
    const TrainingConfig& t = planner_.training();
    std::string out = "hexiseq: no layout of " + planner_.model().name + " over " +
                      std::to_string(t.seq_len) + " tokens fits in 95 % of the memory of the " +
                      std::to_string(devices_.size()) + " devices";
    if (!closest_) return out + " (even the model states alone do not fit)";
    for (const auto& m : closest_->memory) {
      if (m.total() <= m.limit()) continue;
      return out + "; e.g. device " + std::to_string(m.device) + " needs " +
             fixed(m.total() / kGiB, 2) + " GiB of " + fixed(m.limit() / kGiB, 2) + " GiB";
    }
    return out;
  }

  const SequenceCost& judge_;
  const SequenceCost& planner_;
  LinearModel lm_;
  std::vector<int> devices_;
  std::int64_t block_;
  const HexiSeqOptions& options_;
  double bar_ = kInfinity;  // s
  bool screen_ = false;
  std::chrono::steady_clock::time_point start_;
  std::optional<HexiSeqResult> best_;
  std::optional<HexiSeqResult> best_solved_;  // the best layout of the programs (not polished)
  std::optional<IterationTime> closest_;      // the best layout that does not fit
  long candidates_ = 0, solves_ = 0;
  long cut_ = 0;  // groupings left at a floor and programs cut off
  std::vector<SequenceLayout>* record_ = nullptr;
  std::map<std::vector<std::vector<int>>, double> evaluated_;  // evaluate() by groups
  // A program's answer: shards and heads in its devices' order; none when infeasible or cut
  // off (then the layer time its relaxation put it at).
  struct Memo {
    std::optional<std::pair<std::vector<std::int64_t>, std::vector<int>>> answer;
    double cut_off_s = -kInfinity;
  };
  std::map<std::string, Memo> memo_;
};

// Stage 1 for large meshes: the same group size in every domain (whole domains down to
// single devices), the merges, then each GPU type's group size in turn while the closed form
// improves (two passes).
void descend_by_type(Search& search, const Cluster& cluster, const std::vector<int>& devices,
                     const HexiSeqOptions& options) {
  const std::vector<std::vector<int>> ds = domains(cluster, devices);
  std::map<int, std::vector<int>> sizes;  // type -> the sizes its first domain allows
  std::set<int> uniform;
  for (const auto& d : ds) {
    const int type = cluster.devices()[d.front()].gpu_type;
    if (!sizes.count(type)) sizes[type] = divisors(static_cast<int>(d.size()));
    for (int k : divisors(static_cast<int>(d.size()))) uniform.insert(k);
  }
  std::map<int, int> best;
  double best_time = kInfinity;
  for (auto k = uniform.rbegin(); k != uniform.rend() && !search.out_of_time(); ++k) {
    std::map<int, int> trial;
    for (const auto& [type, allowed] : sizes) trial[type] = *k;
    const double t = search.evaluate(grouping_by_type(cluster, ds, trial));
    if (t < best_time) best_time = t, best = trial;
  }
  // Dealt before merged: the dealt groupings' small programs often find the layout that
  // screens out the merged groups' large ones.
  std::vector<Grouping> more = dealt_groupings(devices, options.largest_merge);
  for (Grouping& g : merged_groupings(cluster, devices, options.largest_merge)) {
    more.push_back(std::move(g));
  }
  for (const Grouping& g : more) {
    if (search.out_of_time()) return;
    search.evaluate(g);
  }
  if (best.empty() || sizes.size() < 2) return;
  for (int pass = 0; pass < 2; ++pass) {
    bool improved = false;
    for (const auto& [type, allowed] : sizes) {
      for (int k : allowed) {
        if (k == best[type] || search.out_of_time()) continue;
        std::map<int, int> trial = best;
        trial[type] = k;
        const double t = search.evaluate(grouping_by_type(cluster, ds, trial));
        if (t < best_time) best_time = t, best = trial, improved = true;
      }
    }
    if (!improved) return;
  }
}

}  // namespace

HexiSeqOptions read_hexiseq_options(const JsonNode& node, HexiSeqOptions o) {
  node.require_object();
  static constexpr std::string_view kKeys[] = {
      "solver",          "time_budget_s",  "rounds",
      "block_tokens",    "split_kv_heads", "exhaustive_limit",
      "screen",          "largest_merge",  "solver_time_limit_s",
      "mip_gap",         "mip_node_limit", "mip_node_limit_gap",
      "idle_slow_types", "lp_screen",      "zero_stages",
      "tensor_groups"};
  for (const auto& [key, value] : node.json().items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys)) continue;
    std::string known;
    for (std::string_view k : kKeys) known += (known.empty() ? "" : ", ") + std::string(k);
    node.at(key).fail_message("unknown HexiSeq option \"" + key + "\" (known: " + known + ")");
  }
  if (auto solver = node.find("solver")) {
    auto backend = kBackendNames.parse(solver->str());
    if (!backend) solver->fail(kBackendNames.list("\"", " or "));
    o.backend = o.exact_backend = *backend;
  }
  if (auto t = node.find("time_budget_s")) o.time_budget_s = t->number_in(0, 1e7);
  o.rounds = static_cast<int>(node.integer_or("rounds", 1, 100, o.rounds));
  o.block_tokens = node.integer_or("block_tokens", 0, std::int64_t{1} << 40, o.block_tokens);
  o.split_kv_heads = node.boolean_or("split_kv_heads", o.split_kv_heads);
  const auto count = [&](const char* key, std::size_t fallback) {
    return static_cast<std::size_t>(
        node.integer_or(key, 0, 1 << 20, static_cast<std::int64_t>(fallback)));
  };
  o.exhaustive_limit = count("exhaustive_limit", o.exhaustive_limit);
  o.screen = count("screen", o.screen);
  o.largest_merge = std::max<std::size_t>(1, count("largest_merge", o.largest_merge));
  if (auto t = node.find("solver_time_limit_s")) o.solver_time_limit_s = t->number_in(0.01, 1e5);
  if (auto g = node.find("mip_gap")) o.mip_gap = g->number_in(0, 0.5);
  o.mip_node_limit = node.integer_or("mip_node_limit", 0, std::int64_t{1} << 30, o.mip_node_limit);
  if (auto g = node.find("mip_node_limit_gap")) o.mip_node_limit_gap = g->number_in(0, 1);
  o.idle_slow_types = node.boolean_or("idle_slow_types", o.idle_slow_types);
  o.lp_screen = node.boolean_or("lp_screen", o.lp_screen);
  o.zero_stages = node.boolean_or("zero_stages", o.zero_stages);
  o.tensor_groups = node.boolean_or("tensor_groups", o.tensor_groups);
  return o;
}

Json HexiSeqResult::to_json(const std::string& scheduler) const {
  const HexiSeqResult& r = *this;
  Json memory = Json::array();
  for (const auto& m : r.time.memory) {
    memory.push_back({{"device", m.device},
                      {"total_gib", m.total() / kGiB},
                      {"capacity_gib", m.capacity / kGiB}});
  }
  Json devices = Json::array();
  for (const auto& d : r.time.layer.devices) {
    devices.push_back({{"device", d.device},
                       {"group", d.group},
                       {"rank", d.rank},
                       {"token_wise_s", d.token_wise_s},
                       {"ulysses_s", d.ulysses_s},
                       {"ring_s", d.ring_s},
                       {"attention_s", d.attention_s}});
  }
  Json out = {{"scheduler", scheduler},
              {"grouping", r.grouping},
              {"iteration_time_s", r.time.iteration_s},
              {"sequence_s", r.time.sequence_s},
              {"layer_s", r.time.layer.time_s},
              {"sync_s", r.time.sync_s},
              {"optimizer_s", r.time.optimizer_s},
              {"tokens_per_s", r.time.tokens_per_s},
              {"fits", r.time.fits},
              {"search_time_s", r.search_time_s},
              {"candidates", r.candidates},
              {"solves", r.solves},
              {"budget_exhausted", r.budget_exhausted},
              {"devices", devices},
              {"memory", memory},
              {"sequence", hexi::to_json(r.layout)}};
  if (r.zero_stage >= 0) out["zero_stage"] = r.zero_stage;
  if (r.proven) {
    out["proven"] = *r.proven;
    out["gap"] = r.exact_gap;
  }
  return out;
}

TrainingConfig training_of(const TrainingConfig& training, const HexiSeqResult& result) {
  TrainingConfig t = training;
  if (result.zero_stage >= 0) t.zero_stage = result.zero_stage;
  return t;
}

bool better_time(const IterationTime& a, const IterationTime& b) {
  if (a.fits != b.fits) return a.fits;
  return a.iteration_s < b.iteration_s;
}

bool better_layout(const HexiSeqResult& a, const std::optional<HexiSeqResult>& b) {
  return !b || better_time(a.time, b->time);
}

namespace {

// The search over exactly `devices` (sorted).
Result<HexiSeqResult> search_mesh(const SequenceCost& cost, const std::vector<int>& devices,
                                  const HexiSeqOptions& options, double bar = kInfinity) {
  const Cluster& cluster = cost.cluster();
  const std::int64_t s = cost.training().seq_len;
  const auto block = token_block(s, static_cast<int>(devices.size()), options.block_tokens);
  if (!block) {
    return bad_input("hexiseq: the sequence length S = " + std::to_string(s) +
                     " must be even and a multiple of the token block (" +
                     std::to_string(options.block_tokens) + "): the mirrored layout needs it");
  }
  SequenceCost planner = cost;
  if (options.identical_devices) planner.set_identical(devices.front());
  Search search(cost, planner, devices, *block, options, bar);
  const std::vector<Grouping> family = grouping_family(cluster, devices, options.exhaustive_limit);
  if (!family.empty()) {
    // Every grouping of whole domains (merged or not) and every dealt one in full: the LP's
    // proportional guess misjudges groups that span machines, whose best layouts often idle
    // a slow, badly connected type. The rest ranked by the LP's estimate, the best `screen`
    // in full.
    const std::vector<std::vector<int>> ds = domains(cluster, devices);
    std::vector<std::pair<double, std::size_t>> ranked;
    for (std::size_t i = 0; i < family.size(); ++i) {
      if (family[i].dealt || whole_domains(family[i], ds)) {
        search.evaluate(family[i]);
      } else {
        ranked.push_back({search.estimate(family[i]), i});
      }
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::size_t full = std::min(ranked.size(), options.screen);
    for (std::size_t k = 0; k < full && !search.out_of_time(); ++k) {
      search.evaluate(family[ranked[k].second]);
    }
  } else {
    search.set_screen(true);
    descend_by_type(search, cluster, devices, options);
  }
  search.polish();
  return search.finish();
}

}  // namespace

std::vector<SequenceLayout> grouping_layouts(const SequenceCost& cost,
                                             const std::vector<int>& devices,
                                             const Grouping& grouping, std::int64_t block,
                                             const HexiSeqOptions& options) {
  std::vector<SequenceLayout> out;
  HexiSeqOptions every_round = options;  // no program cut off: every round's layout
  every_round.lp_screen = false;
  Search search(cost, cost, devices, block, every_round);
  search.record(&out);
  search.evaluate(grouping);
  return out;
}

std::vector<int> fastest_type_mesh(const Cluster& cluster, const std::vector<int>& devices,
                                   const HexiSeqOptions& options) {
  if (options.identical_devices || !options.idle_slow_types) return {};
  const auto faster = [&](int a, int b) {
    const GpuSpec &ga = cluster.gpu(a), &gb = cluster.gpu(b);
    return ga.tflops != gb.tflops ? ga.tflops > gb.tflops : ga.name < gb.name;
  };
  const int best = *std::min_element(devices.begin(), devices.end(), faster);
  std::vector<int> out;
  for (int d : devices) {
    if (cluster.gpu(d).name == cluster.gpu(best).name) out.push_back(d);
  }
  if (out.size() == devices.size()) out.clear();
  return out;
}

std::string fastest_type_grouping(std::size_t used, std::size_t all, const std::string& grouping) {
  return "fastest type only, " + std::to_string(used) + " of " + std::to_string(all) + " GPUs; " +
         grouping;
}

namespace {

// The Ulysses search: the whole mesh, then the fastest type's mesh alone.
Result<HexiSeqResult> search_ulysses(const SequenceCost& cost, const std::vector<int>& devices,
                                     const HexiSeqOptions& options) {
  const Cluster& cluster = cost.cluster();
  const auto start = std::chrono::steady_clock::now();
  auto best = search_mesh(cost, devices, options, options.bar_s);
  const double searched =
      best ? best->search_time_s
           : std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Without a bar from outside, a whole mesh with no layout has none that fits; with one, it
  // may only have none that beats the bar.
  if (!best && !std::isfinite(options.bar_s)) return best;
  // The mesh of the fastest type alone: where the slower types' compute does not pay for what
  // they add to every ring step, all-to-all and ZeRO-3 gather (a slow link between machines
  // above all), leaving them idle is faster. Searched as the whole mesh is (homogeneous, so
  // quickly), within what is left of the time budget. (Meshes of several of the fastest types
  // are not searched: their integer programs cost as much as the whole mesh's.)
  const std::vector<int> subset = fastest_type_mesh(cluster, devices, options);
  if (subset.empty()) return best;
  HexiSeqOptions o = options;
  if (options.time_budget_s > 0) {
    o.time_budget_s = options.time_budget_s - searched;
    if (o.time_budget_s <= 0) {
      if (best) best->budget_exhausted = true;
      return best;
    }
  }
  const double bar = best ? std::min(options.bar_s, best->time.iteration_s) : options.bar_s;
  auto r = search_mesh(cost, subset, o, bar);
  if (!r) return best;  // no layout of these devices fits (or beats the bar)
  r->grouping = fastest_type_grouping(subset.size(), devices.size(), r->grouping);
  if (!best) {
    r->search_time_s += searched;
    return r;
  }
  best->candidates += r->candidates;
  best->solves += r->solves;
  best->search_time_s += r->search_time_s;
  best->budget_exhausted = best->budget_exhausted || r->budget_exhausted;
  if (r->time.fits && r->time.iteration_s < best->time.iteration_s) {
    r->candidates = best->candidates;
    r->solves = best->solves;
    r->search_time_s = best->search_time_s;
    r->budget_exhausted = best->budget_exhausted;
    best = std::move(r);
  }
  return best;
}

}  // namespace

Result<HexiSeqResult> run_hexiseq(const SequenceCost& cost, std::vector<int> devices,
                                  const HexiSeqOptions& options) {
  if (devices.empty()) {
    for (int d = 0; d < cost.cluster().num_devices(); ++d) devices.push_back(d);
  }
  std::sort(devices.begin(), devices.end());
  auto best = search_ulysses(cost, devices, options);
  if (!options.tensor_groups || options.identical_devices) return best;
  const auto block =
      token_block(cost.training().seq_len, static_cast<int>(devices.size()), options.block_tokens);
  if (!block) return best;
  auto tensor = best_tensor_layout(cost, devices, *block, options);
  if (!tensor || !(tensor->time.iteration_s < options.bar_s)) return best;
  if (!best) return std::move(*tensor);
  const bool wins = better_layout(*tensor, *best);
  HexiSeqResult& kept = wins ? *tensor : *best;
  const HexiSeqResult& other = wins ? *best : *tensor;
  kept.candidates += other.candidates;
  kept.solves += other.solves;
  kept.search_time_s += other.search_time_s;
  kept.budget_exhausted = kept.budget_exhausted || other.budget_exhausted;
  return std::move(kept);
}

}  // namespace hexiseq
}  // namespace hexi
