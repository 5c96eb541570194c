#include "scheduler/hexiseq/exact.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <tuple>

namespace hexi {
inline namespace hexiseq {
namespace {

constexpr double kExactMs = 1e3;  // the program counts ms and GiB, as the search's

// The whole-mesh program of one grouping (exact.hpp). Devices are numbered flat, group by
// group; a device's head count k has binary z[f][k].
class ExactProgram {
 public:
  ExactProgram(const LinearModel& lm, const Grouping& grouping, std::int64_t block,
               const HexiSeqOptions& options)
      : lm_(lm),
        grouping_(grouping),
        options_(options),
        b_(static_cast<double>(block)),
        blocks_(static_cast<double>(lm.sequence() / block)),
        nq_(lm.cost().attention().q_heads),
        r_(lm.heads_per_kv()) {
    const int p = static_cast<int>(grouping.groups.size());
    for (int g = 0; g < p; ++g) {
      terms_.push_back(lm.group(grouping.groups[g],
                                p > 1 ? grouping.groups[(g + p - 1) % p] : std::vector<int>{}));
    }
    std::vector<std::string> keys;
    for (const GroupTerms& t : terms_) keys.push_back(program_key(t, 0, 0, {}));
    for (int g = 0; g < p; ++g) {
      alike_.push_back(
          static_cast<int>(std::find(keys.begin(), keys.end(), keys[g]) - keys.begin()));
    }
  }

  ExactGrouping solve(const std::vector<SequenceLayout>& starts) {
    build();
    start_from(starts);
    const Solution s = hexi::solve(p_, options_.exact_backend, options_.solver_time_limit_s);
    ExactGrouping out;
    out.optimal = s.status == SolveStatus::kOptimal || s.status == SolveStatus::kInfeasible;
    if (!s.has_values()) return out;
    out.model_s = s.objective / kExactMs;
    out.bound_s = std::max(0.0, s.bound) / kExactMs;
    out.layout = layout(s.values);
    return out;
  }

 private:
  // The program's start: the best of `starts` in the model (of those laid out on this
  // grouping and fitting its memory), ordered as the symmetry rows ask: interchangeable ranks
  // by (heads, shard), groups alike by tokens (their answers traded whole).
  void start_from(const std::vector<SequenceLayout>& starts) {
    const SequenceLayout* best = nullptr;
    double best_value = kInfinity;
    for (const SequenceLayout& l : starts) {
      if (!on_grouping(l) || lm_.memory_excess(l) > 0) continue;
      const double v = lm_.value(l);
      if (v < best_value) best_value = v, best = &l;
    }
    if (best == nullptr) return;
    const std::int64_t block = static_cast<std::int64_t>(b_);
    const int p = static_cast<int>(terms_.size());
    // Per group: T, then (heads, shard) per rank of the program (grouping order).
    std::vector<std::vector<std::int64_t>> answer(p);
    for (int g = 0; g < p; ++g) {
      const SequenceGroup& sg = best->groups[g];
      const std::vector<int>& devices = grouping_.groups[g];
      std::vector<std::pair<std::int64_t, std::int64_t>> rank(devices.size());
      for (int i = 0; i < sg.size(); ++i) {
        const auto a = std::find(devices.begin(), devices.end(), sg.devices[i]) - devices.begin();
        rank[a] = {sg.heads[i], sg.shards[i] / block};
      }
      const std::vector<int> classes = interchangeable(terms_[g]);
      sort_within(classes, rank);
      answer[g].push_back(sg.tokens / block);
      for (const auto& [heads, shard] : rank)
        answer[g].push_back(heads), answer[g].push_back(shard);
    }
    sort_within(alike_, answer);
    for (int g = 0; g < p; ++g) {
      p_.start.push_back({tg_[g], static_cast<double>(answer[g][0])});
      for (int a = 0; a < static_cast<int>(grouping_.groups[g].size()); ++a) {
        const int f = first_[g] + a;
        const std::int64_t heads = answer[g][1 + 2 * a];
        p_.start.push_back({x_[f], static_cast<double>(answer[g][2 + 2 * a])});
        for (int k = 0; k <= nq_; ++k) p_.start.push_back({z_[f][k], k == heads ? 1.0 : 0.0});
      }
    }
  }

  // Sorts the entries of each class (`classes[i]`: the class of entry i) in decreasing order
  // among the class's places.
  template <class T>
  static void sort_within(const std::vector<int>& classes, std::vector<T>& v) {
    for (int c = 0; c < static_cast<int>(v.size()); ++c) {
      std::vector<int> places;
      for (int i = 0; i < static_cast<int>(v.size()); ++i) {
        if (classes[i] == c) places.push_back(i);
      }
      std::vector<T> sorted;
      for (int i : places) sorted.push_back(v[i]);
      std::sort(sorted.rbegin(), sorted.rend());
      for (std::size_t m = 0; m < places.size(); ++m) v[places[m]] = sorted[m];
    }
  }

  // Whether `l`'s groups are the grouping's, in its order, in whole blocks.
  bool on_grouping(const SequenceLayout& l) const {
    if (l.groups.size() != grouping_.groups.size()) return false;
    const std::int64_t block = static_cast<std::int64_t>(b_);
    for (std::size_t g = 0; g < l.groups.size(); ++g) {
      std::vector<int> devices = l.groups[g].devices;
      std::sort(devices.begin(), devices.end());
      if (devices != grouping_.groups[g] || l.groups[g].tokens % block != 0) return false;
      for (std::int64_t shard : l.groups[g].shards) {
        if (shard % block != 0) return false;
      }
    }
    return true;
  }

  // kv heads a device with k query heads needs (the model's bound: whole GQA groups).
  int kv_of(int k) const { return (k + r_ - 1) / r_; }
  double q_of(int k) const { return k + 2 * kv_of(k); }
  // Head counts a device may take: any, or whole GQA groups only.
  bool allowed(int k) const { return options_.split_kv_heads || k % r_ == 0; }

  int add(const std::string& name, double upper, bool integer = false, double objective = 0) {
    return p_.add_variable({name, 0, upper, integer, objective});
  }

  // w = y z for y in [0, upper] and a binary z: exact McCormick (w >= 0 by its bound).
  int product(const std::string& name, int y, int z, double upper) {
    const int w = add(name, upper);
    p_.add_constraint({name + ".z", {{w, 1}, {z, -upper}}, Sense::kLessEqual, 0});
    p_.add_constraint({name + ".y", {{w, 1}, {y, -1}}, Sense::kLessEqual, 0});
    p_.add_constraint({name + ".yz", {{w, 1}, {y, -1}, {z, -upper}}, Sense::kGreaterEqual, -upper});
    return w;
  }

  void build() {
    t_ = add("t", kInfinity, false, 1);
    tmax_ = add("Tmax", blocks_);
    Constraint tokens{"tokens", {}, Sense::kEqual, blocks_};
    for (int g = 0; g < static_cast<int>(terms_.size()); ++g) {
      tg_.push_back(p_.add_variable({"T" + std::to_string(g), 1, blocks_, true, 0}));
      tokens.terms.push_back({tg_[g], 1});
      if (terms_.size() > 1) {
        p_.add_constraint(
            {"Tmax" + std::to_string(g), {{tmax_, 1}, {tg_[g], -1}}, Sense::kGreaterEqual, 0});
      }
      add_group_variables(g);
    }
    p_.add_constraint(tokens);
    for (int g = 0; g < static_cast<int>(terms_.size()); ++g) add_group_constraints(g);
    order_alike_groups();
  }

  // Groups alike (equal programs but for their variables: program_key) may trade their
  // whole answers, so each takes at least the tokens of the next one alike.
  void order_alike_groups() {
    const int p = static_cast<int>(terms_.size());
    for (int g = 0; g < p; ++g) {
      for (int h = g + 1; h < p; ++h) {
        if (alike_[h] != alike_[g]) continue;
        p_.add_constraint(
            {"alike" + std::to_string(g), {{tg_[g], 1}, {tg_[h], -1}}, Sense::kGreaterEqual, 0});
        break;
      }
    }
  }

  // x, one-hot heads, and the products T z, T_max z, x_i z_jk of group g's devices.
  void add_group_variables(int g) {
    const int n = static_cast<int>(terms_[g].devices.size());
    first_.push_back(static_cast<int>(x_.size()));
    Constraint shards{"shards" + std::to_string(g), {{tg_[g], -1}}, Sense::kEqual, 0};
    Constraint heads{"heads" + std::to_string(g), {}, Sense::kEqual, static_cast<double>(nq_)};
    for (int a = 0; a < n; ++a) {
      const std::string d = std::to_string(g) + "." + std::to_string(a);
      x_.push_back(add("x" + d, blocks_, true));
      shards.terms.push_back({x_.back(), 1});
      std::vector<int> z, pt, pm;
      Constraint one{"onehot" + d, {}, Sense::kEqual, 1};
      for (int k = 0; k <= nq_; ++k) {
        z.push_back(p_.add_variable(
            {"z" + d + "." + std::to_string(k), 0, allowed(k) ? 1.0 : 0.0, true, 0}));
        one.terms.push_back({z[k], 1});
        heads.terms.push_back({z[k], static_cast<double>(k)});
        const std::string kk = d + "." + std::to_string(k);
        pt.push_back(k > 0 ? product("P" + kk, tg_[g], z[k], blocks_) : -1);
        pm.push_back(k > 0 && terms_.size() > 1 ? product("M" + kk, tmax_, z[k], blocks_) : -1);
      }
      p_.add_constraint(one);
      z_.push_back(z);
      pt_.push_back(pt);
      pm_.push_back(pm);
    }
    p_.add_constraint(shards);
    p_.add_constraint(heads);
    for (int a = 0; a < n; ++a) {
      for (int c = 0; c < n; ++c) {
        if (a == c) continue;
        for (int k = 1; k <= nq_; ++k) {
          const int fa = first_[g] + a, fc = first_[g] + c;
          y_[{fa, fc, k}] =
              product("Y" + std::to_string(fa) + "." + std::to_string(fc) + "." + std::to_string(k),
                      x_[fa], z_[fc][k], blocks_);
        }
      }
    }
    add_aggregates(g);
    add_symmetry(g);
  }

  // Valid rows that the products' McCormick rows do not imply once z is fractional (the
  // relaxation would otherwise drop attention and all-to-all work): per device, its products
  // with the head-count binaries sum to the factor (a device with no heads: to 0), and the
  // group's attention work T_g sum_i h_i is T_g n_q.
  void add_aggregates(int g) {
    const int n = static_cast<int>(terms_[g].devices.size());
    Constraint work{
        "work" + std::to_string(g), {{tg_[g], -static_cast<double>(nq_)}}, Sense::kEqual, 0};
    auto sums_to = [&](const std::string& name, int factor, int f, auto product_of) {
      Constraint up{name + ".up", {{factor, -1}}, Sense::kLessEqual, 0};
      Constraint down{name + ".down", {{factor, -1}, {z_[f][0], blocks_}}, Sense::kGreaterEqual, 0};
      for (int k = 1; k <= nq_; ++k) {
        up.terms.push_back({product_of(k), 1});
        down.terms.push_back({product_of(k), 1});
      }
      p_.add_constraint(std::move(up));
      p_.add_constraint(std::move(down));
    };
    for (int a = 0; a < n; ++a) {
      const int f = first_[g] + a;
      const std::string d = std::to_string(f);
      sums_to("Psum" + d, tg_[g], f, [&](int k) { return pt_[f][k]; });
      if (terms_.size() > 1) sums_to("Msum" + d, tmax_, f, [&](int k) { return pm_[f][k]; });
      for (int k = 1; k <= nq_; ++k) work.terms.push_back({pt_[f][k], static_cast<double>(k)});
      for (int c = 0; c < n; ++c) {
        if (c == a) continue;
        const int fc = first_[g] + c;
        sums_to("Ysum" + d + "." + std::to_string(fc), x_[f], fc, [&](int k) {
          return y_.at({f, fc, k});
        });
      }
    }
    p_.add_constraint(std::move(work));
  }

  // Interchangeable ranks (linear.hpp's classes): each at least the next one of its class,
  // (heads, shard) lexicographically.
  void add_symmetry(int g) {
    const std::vector<int> classes = interchangeable(terms_[g]);
    const int n = static_cast<int>(classes.size());
    const double lex = blocks_ + 1;
    for (int a = 0; a < n; ++a) {
      for (int c = a + 1; c < n; ++c) {
        if (classes[c] != classes[a]) continue;
        const int fa = first_[g] + a, fc = first_[g] + c;
        Constraint order{
            "order" + std::to_string(fa), {{x_[fa], 1}, {x_[fc], -1}}, Sense::kGreaterEqual, 0};
        for (int k = 1; k <= nq_; ++k) {
          order.terms.push_back({z_[fa][k], lex * k});
          order.terms.push_back({z_[fc][k], -lex * k});
        }
        p_.add_constraint(std::move(order));
        break;
      }
    }
  }

  // sum over k of coefficient(k) Y[i, j, k] (x_i times j's head-count binaries).
  void add_y(std::vector<Term>& terms, int i, int j, double scale, bool q) const {
    for (int k = 1; k <= nq_; ++k) {
      terms.push_back({y_.at({i, j, k}), scale * (q ? q_of(k) : k)});
    }
  }

  // (S - T) kv or (S (1 + gamma) - T) kv of device f, in the model's blocks: sum_k kv(k)
  // (S_over z_k - b P_k), `scale` per token.
  void add_ring(std::vector<Term>& terms, int f, double scale, double tokens_over) const {
    for (int k = 1; k <= nq_; ++k) {
      terms.push_back({z_[f][k], scale * kv_of(k) * tokens_over});
      terms.push_back({pt_[f][k], -scale * kv_of(k) * b_});
    }
  }

  void at_least(const std::string& name, int var, std::vector<Term> terms) {
    for (auto& term : terms) term.coefficient = -term.coefficient;
    terms.push_back({var, 1});
    p_.add_constraint({name, std::move(terms), Sense::kGreaterEqual, 0});
  }

  void add_group_constraints(int g) {
    const GroupTerms& gt = terms_[g];
    const int n = static_cast<int>(gt.devices.size());
    const std::string pre = std::to_string(g) + ".";
    const int a1 = add(pre + "A1", kInfinity), a2 = add(pre + "A2", kInfinity);
    const int rf = add(pre + "Rf", kInfinity), rb = add(pre + "Rb", kInfinity);
    const double rp = lm_.replay(), S = static_cast<double>(lm_.sequence());
    const double gamma = lm_.grad_ratio();
    const double lat = n > 1 ? 2 * gt.a2a_latency_s : 0.0;
    for (int a = 0; a < n; ++a) {
      const int f = first_[g] + a;
      const DeviceTerms& d = gt.devices[a];
      const std::string di = pre + std::to_string(a);
      p_.add_constraint({"time" + di,
                         {{t_, 1},
                          {x_[f], -kExactMs * d.token_s * b_},
                          {a1, -(2 + rp)},
                          {a2, -(2 + rp)},
                          {rf, -(1 + rp)},
                          {rb, -1}},
                         Sense::kGreaterEqual,
                         kExactMs * (d.token_fixed_s + (2 + rp) * lat)});
      std::vector<Term> recv_qkv, send_qkv, send_o, recv_o;
      for (int c = 0; c < n; ++c) {
        if (c == a) continue;
        const int fc = first_[g] + c;
        add_y(recv_qkv, fc, f, kExactMs * b_ * gt.pair_s[c][a], true);
        add_y(send_qkv, f, fc, kExactMs * b_ * gt.pair_s[a][c], true);
        add_y(send_o, fc, f, kExactMs * b_ * gt.pair_s[a][c], false);
        add_y(recv_o, f, fc, kExactMs * b_ * gt.pair_s[c][a], false);
      }
      at_least("qkv.in" + di, a1, recv_qkv);
      at_least("qkv.out" + di, a1, send_qkv);
      at_least("o.out" + di, a2, send_o);
      at_least("o.in" + di, a2, recv_o);
      std::vector<Term> compute, compute_b, ring_f, ring_b;
      for (int k = 1; k <= nq_; ++k) {
        compute.push_back({pt_[f][k], kExactMs * d.attention_s * b_ * k});
        compute_b.push_back({pt_[f][k], kExactMs * d.attention_backward_s * b_ * k});
      }
      at_least("ring.f" + di, rf, compute);
      at_least("ring.b" + di, rb, compute_b);
      if (gt.ring_s[a] > 0) {
        add_ring(ring_f, f, kExactMs * gt.ring_s[a], S);
        add_ring(ring_b, f, kExactMs * gt.ring_s[a], S * (1 + gamma));
        at_least("kv.f" + di, rf, ring_f);
        at_least("kv.b" + di, rb, ring_b);
      }
      add_memory(gt, a, f, di);
    }
    add_nics(g, a1, a2, rf, rb, S, gamma);
  }

  void add_memory(const GroupTerms& gt, int a, int f, const std::string& di) {
    const DeviceTerms& d = gt.devices[a];
    Constraint mem{"memory" + di,
                   {{x_[f], d.memory_token * b_ / kGiB}},
                   Sense::kLessEqual,
                   (d.memory_limit - d.memory_fixed) / kGiB};
    for (int k = 1; k <= nq_; ++k) {
      mem.terms.push_back({pt_[f][k], lm_.memory_ulysses() * b_ * (2 * k + 2 * kv_of(k)) / kGiB});
      if (pm_[f][k] >= 0) {
        mem.terms.push_back({pm_[f][k], lm_.memory_ring() * b_ * kv_of(k) / kGiB});
      }
    }
    p_.add_constraint(mem);
  }

  // Each machine's NIC share of the all-to-alls (groups spanning machines) and of the ring.
  void add_nics(int g, int a1, int a2, int rf, int rb, double S, double gamma) {
    const GroupTerms& gt = terms_[g];
    const int n = static_cast<int>(gt.devices.size());
    for (int m = 0; m < static_cast<int>(gt.machines.size()); ++m) {
      const double nic = kExactMs * gt.nic_s[m] * b_;
      const std::string dm = std::to_string(g) + ".nic" + std::to_string(m);
      std::vector<Term> out_qkv, in_qkv, out_o, in_o, ring_f, ring_b;
      for (int a = 0; a < n; ++a) {
        if (gt.devices[a].machine != gt.machines[m]) continue;
        const int f = first_[g] + a;
        for (int c = 0; c < n; ++c) {
          if (gt.devices[c].machine == gt.machines[m]) continue;
          const int fc = first_[g] + c;
          add_y(out_qkv, f, fc, nic, true);
          add_y(in_qkv, fc, f, nic, true);
          add_y(out_o, fc, f, nic, false);
          add_y(in_o, f, fc, nic, false);
        }
        add_ring(ring_f, f, 2 * kExactMs * gt.nic_s[m], S);
        add_ring(ring_b, f, 2 * kExactMs * gt.nic_s[m], S * (1 + gamma));
      }
      if (gt.machines.size() > 1) {
        at_least(dm + ".qkv.out", a1, out_qkv);
        at_least(dm + ".qkv.in", a1, in_qkv);
        at_least(dm + ".o.out", a2, out_o);
        at_least(dm + ".o.in", a2, in_o);
      }
      if (gt.ring_nic[m]) {
        at_least(dm + ".ring.f", rf, ring_f);
        at_least(dm + ".ring.b", rb, ring_b);
      }
    }
  }

  SequenceLayout layout(const std::vector<double>& v) const {
    SequenceLayout out;
    out.split_kv_heads = options_.split_kv_heads;
    for (int g = 0; g < static_cast<int>(terms_.size()); ++g) {
      const std::int64_t block = static_cast<std::int64_t>(b_);
      SequenceGroup group{grouping_.groups[g], block * std::llround(v[tg_[g]]), {}, {}};
      for (int a = 0; a < group.size(); ++a) {
        const int f = first_[g] + a;
        group.shards.push_back(block * std::llround(v[x_[f]]));
        int heads = 0;
        for (int k = 1; k <= nq_; ++k) heads += v[z_[f][k]] > 0.5 ? k : 0;
        group.heads.push_back(heads);
      }
      align_heads(group, r_);
      out.groups.push_back(std::move(group));
    }
    return out;
  }

  const LinearModel& lm_;
  const Grouping& grouping_;
  const HexiSeqOptions& options_;
  const double b_;       // tokens per block
  const double blocks_;  // S in blocks
  const int nq_;
  const int r_;  // query heads per kv head
  std::vector<GroupTerms> terms_;
  std::vector<int> alike_;  // per group: the first group alike (equal program_key)
  Problem p_;
  int t_ = 0, tmax_ = 0;
  std::vector<int> tg_;                         // T_g, blocks
  std::vector<int> first_;                      // flat index of group g's rank 0
  std::vector<int> x_;                          // [f]: shard, blocks
  std::vector<std::vector<int>> z_, pt_, pm_;   // [f][k]: z, T z, T_max z
  std::map<std::tuple<int, int, int>, int> y_;  // (i, j, k): x_i z_jk
};

}  // namespace

ExactGrouping solve_exact(const LinearModel& lm, const Grouping& grouping, std::int64_t block,
                          const HexiSeqOptions& options,
                          const std::vector<SequenceLayout>& starts) {
  return ExactProgram(lm, grouping, block, options).solve(starts);
}

namespace {

using Clock = std::chrono::steady_clock;

// Every grouping of one mesh's family into `out` (its counts) and `best`. With a time budget
// (options.time_budget_s > 0, counted from `start`) each program gets at most what is left,
// and the groupings not reached are skipped: then nothing is proven and the budget reported
// exhausted.
Status exact_over(const SequenceCost& cost, const std::vector<int>& devices,
                  const HexiSeqOptions& options, Clock::time_point start, ExactResult& out,
                  std::optional<HexiSeqResult>& best) {
  const std::int64_t s = cost.training().seq_len;
  const auto block = token_block(s, static_cast<int>(devices.size()), options.block_tokens);
  if (!block) {
    return bad_input("hexiseq-exact: the sequence length S = " + std::to_string(s) +
                     " must be even and a multiple of the token block (" +
                     std::to_string(options.block_tokens) + ")");
  }
  const LinearModel lm(cost, static_cast<int>(devices.size()));
  for (const Grouping& g : grouping_family(cost.cluster(), devices, SIZE_MAX)) {
    HexiSeqOptions o = options;
    if (options.time_budget_s > 0) {
      const double left =
          options.time_budget_s - std::chrono::duration<double>(Clock::now() - start).count();
      if (left <= 0) {
        out.proven = false;
        out.best.budget_exhausted = true;
        break;
      }
      o.solver_time_limit_s = std::min(o.solver_time_limit_s, left);
    }
    ++out.groupings;
    const ExactGrouping e =
        solve_exact(lm, g, *block, o, grouping_layouts(cost, devices, g, *block, o));
    out.proven = out.proven && e.optimal;
    if (!e.optimal && e.layout && e.model_s > 0) {
      out.gap = std::max(out.gap, (e.model_s - e.bound_s) / e.model_s);
    }
    if (!e.layout) continue;
    IterationTime it = cost.iteration(*e.layout);
    ++out.best.candidates;
    if (!it.fits || (best && best->time.iteration_s <= it.iteration_s)) continue;
    best = HexiSeqResult{*e.layout, std::move(it), g.name};
  }
  return {};
}

}  // namespace

Result<ExactResult> run_hexiseq_exact(const SequenceCost& cost, std::vector<int> devices,
                                      const HexiSeqOptions& options) {
  const auto start = Clock::now();
  const Cluster& cluster = cost.cluster();
  if (devices.empty()) {
    for (int d = 0; d < cluster.num_devices(); ++d) devices.push_back(d);
  }
  std::sort(devices.begin(), devices.end());
  if (static_cast<int>(devices.size()) > kExactMaxDevices) {
    return bad_input("hexiseq-exact: " + std::to_string(devices.size()) +
                     " devices; the exact search takes at most " +
                     std::to_string(kExactMaxDevices));
  }
  ExactResult out;
  std::optional<HexiSeqResult> best;
  if (auto r = exact_over(cost, devices, options, start, out, best); !r) return r.error();
  // The same two meshes as the search: the whole one and, unless told otherwise, the fastest
  // GPU type's alone (its groupings named as the search names them).
  const std::vector<int> subset = fastest_type_mesh(cluster, devices, options);
  if (!subset.empty()) {
    std::optional<HexiSeqResult> alone;
    ExactResult counts;
    if (auto r = exact_over(cost, subset, options, start, counts, alone); !r) return r.error();
    out.groupings += counts.groupings;
    out.best.candidates += counts.best.candidates;
    out.proven = out.proven && counts.proven;
    out.gap = std::max(out.gap, counts.gap);
    out.best.budget_exhausted = out.best.budget_exhausted || counts.best.budget_exhausted;
    if (alone && (!best || alone->time.iteration_s < best->time.iteration_s)) {
      alone->grouping = fastest_type_grouping(subset.size(), devices.size(), alone->grouping);
      best = std::move(alone);
    }
  }
  if (!best && out.best.budget_exhausted) {
    return bad_input("hexiseq-exact: the time budget ran out before a program found a layout");
  }
  if (!best) {
    return bad_input("hexiseq-exact: no layout of " + cost.model().name + " over " +
                     std::to_string(cost.training().seq_len) +
                     " tokens fits in 95 % of the devices' memory");
  }
  const long candidates = out.best.candidates;
  const bool exhausted = out.best.budget_exhausted;
  out.best = std::move(*best);
  out.best.candidates = candidates;
  out.best.budget_exhausted = exhausted;
  out.best.solves = out.groupings;
  out.best.proven = out.proven;
  out.best.exact_gap = out.gap;
  out.best.search_time_s = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

}  // namespace hexiseq
}  // namespace hexi
