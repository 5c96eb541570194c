#pragma once
// Stage 1 of the HexiSeq search: candidate groupings of a mesh's devices into all-to-all
// groups, from the topology (as HexiSeq clusters GPUs by their NVLink domains).
//
// Domains: the devices of one machine behind NVLink/NVSwitch, or of one CPU socket of a PCIe
// or host-staged machine (fast all-to-all inside, the NIC or the inter-socket link outside).
// A grouping cuts every domain into equal groups of a size dividing it (a domain's own
// choice: whole, halves, ..., single devices) and may merge whole domains into one group
// (all-to-all across them). Groups are in ring order: by their first device.

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "topologies/cluster.hpp"

namespace hexi {
inline namespace hexiseq {

struct Grouping {
  std::string name;                      // how it was made, e.g. "size 4 | merge 0+1"
  std::vector<std::vector<int>> groups;  // ring order; devices in id order
  bool dealt = false;                    // made by dealt_groupings
};

// The domains of `devices` (in id order), in device order.
std::vector<std::vector<int>> domains(const Cluster& cluster, const std::vector<int>& devices);

// Every domain cut into groups of `size[d]` devices (clamped to the domain; a size that does
// not divide it leaves a smaller last group), then the whole domains of each `merges` entry
// (indices into domains) joined into one group.
Grouping make_grouping(const std::vector<std::vector<int>>& domains, const std::vector<int>& size,
                       const std::vector<std::vector<int>>& merges = {});

// The whole family (every domain any size dividing it; every set partition of the domains
// left whole into merged groups; the dealt groupings), or nothing when it has more than
// `limit` members. The exact search's space; the heuristic search enumerates it too when it
// is small.
std::vector<Grouping> grouping_family(const Cluster& cluster, const std::vector<int>& devices,
                                      std::size_t limit);

// Merges of whole domains for any mesh, groups of at most `largest` devices (an all-to-all
// over NICs rarely pays beyond, and its program grows with the square of the group):
// consecutive domains of one GPU type in pairs, every domain of a type into one group, and
// the whole mesh as one group (plain Ulysses).
std::vector<Grouping> merged_groupings(const Cluster& cluster, const std::vector<int>& devices,
                                       std::size_t largest);

// The devices (id order) dealt round-robin into groups of u (group g: devices g, g + P/u,
// ...), for every u dividing P with 1 < u < P and u <= `largest`: all-to-alls across
// machines, the ring inside them (the round-robin baseline's placements).
std::vector<Grouping> dealt_groupings(const std::vector<int>& devices, std::size_t largest);

// Every domain of GPU type t cut into groups of `size_by_type[t]` (types not named: whole).
Grouping grouping_by_type(const Cluster& cluster, const std::vector<std::vector<int>>& domains,
                          const std::map<int, int>& size_by_type);

// Whether every group of `g` is a union of whole domains (the machines kept whole, merged
// or not).
bool whole_domains(const Grouping& g, const std::vector<std::vector<int>>& domains);

// The sizes that divide n (ascending).
std::vector<int> divisors(int n);

}  // namespace hexiseq
}  // namespace hexi
