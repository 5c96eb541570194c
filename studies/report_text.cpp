#include "studies/report_text.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "topologies/paths.hpp"

namespace hexi {
inline namespace studies {
namespace {

constexpr std::string_view kMarkerOpen = "<!-- fragment:";
constexpr std::string_view kMarkerClose = " -->";

bool name_char(char c, bool dots) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         (dots && (c == '.' || c == '-'));
}

bool valid_name(std::string_view name, bool dots) {
  return !name.empty() &&
         std::all_of(name.begin(), name.end(), [dots](char c) { return name_char(c, dots); });
}

// The name of a marker line ("<!-- fragment: NAME -->"); "" when `line` is no marker.
std::string marker_name(std::string_view line) {
  if (line.substr(0, kMarkerOpen.size()) != kMarkerOpen) return "";
  line.remove_prefix(kMarkerOpen.size());
  if (line.size() < kMarkerClose.size() + 2 || line.front() != ' ') return "";
  if (line.substr(line.size() - kMarkerClose.size()) != kMarkerClose) return "";
  const std::string_view name = line.substr(1, line.size() - 1 - kMarkerClose.size());
  return valid_name(name, true) ? std::string(name) : "";
}

// A fragment's lines joined by "\n", without the empty lines at its start and end.
std::string join_trimmed(const std::vector<std::string_view>& lines) {
  std::size_t first = 0, last = lines.size();
  while (first < last && lines[first].empty()) ++first;
  while (last > first && lines[last - 1].empty()) --last;
  std::string text;
  for (std::size_t i = first; i < last; ++i) {
    if (i > first) text += '\n';
    text += lines[i];
  }
  return text;
}

// Walks the placeholders of `text`: calls `on(name)` for each and `literal(piece)` for the text
// between them. An error when a "{{" is not closed by "}}" around a valid name.
template <class OnName, class OnLiteral>
std::string scan(std::string_view text, OnName on, OnLiteral literal) {
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t open = text.find("{{", at);
    if (open == std::string_view::npos) break;
    const std::size_t close = text.find("}}", open + 2);
    const std::string_view name =
        close == std::string_view::npos ? "" : text.substr(open + 2, close - open - 2);
    if (!valid_name(name, false)) {
      return "a \"{{\" not closed by \"}}\" around a placeholder name (a-z, 0-9, _) at \"" +
             std::string(text.substr(open, 40)) + "\"";
    }
    literal(text.substr(at, open - at));
    on(std::string(name));
    at = close + 2;
  }
  literal(text.substr(std::min(at, text.size())));
  return "";
}

}  // namespace

Result<ReportText> ReportText::load(const std::string& relative) {
  const std::string path = (data_root() / relative).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return failure(path + ": cannot open the report's text (does it exist?)");
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return failure(path + ": cannot read the report's text");
  return parse(path, text.str());
}

Result<ReportText> ReportText::parse(std::string file, std::string_view text) {
  ReportText out;
  out.file_ = std::move(file);
  std::string name;  // the fragment being read; "" before the first marker
  std::vector<std::string_view> lines;
  const auto close = [&] {
    if (!name.empty()) out.fragments_.emplace_back(name, join_trimmed(lines));
    lines.clear();
  };
  int number = 0;
  for (std::size_t at = 0; at <= text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    ++number;
    at = end + 1;
    if (line.substr(0, kMarkerOpen.size()) != kMarkerOpen) {
      if (end < text.size() || !line.empty()) lines.push_back(line);
      continue;
    }
    const std::string next = marker_name(line);
    if (next.empty()) {
      return failure(out.file_ + ":" + std::to_string(number) +
                     ": a marker line is \"<!-- fragment: NAME -->\" (NAME: a-z, 0-9, . _ -)");
    }
    const auto names = out.names();
    if (next == name || std::find(names.begin(), names.end(), next) != names.end()) {
      return failure(out.file_ + ":" + std::to_string(number) + ": fragment \"" + next +
                     "\" given twice");
    }
    close();
    name = next;
  }
  close();
  for (const auto& [fragment, body] : out.fragments_) {
    const std::string bad = scan(
        body, [](const std::string&) {}, [](std::string_view) {});
    if (!bad.empty()) return failure(out.file_ + ": fragment \"" + fragment + "\": " + bad);
  }
  return out;
}

Result<std::string> ReportText::fill(const std::string& name, const Fill& values) const {
  const auto it = std::find_if(fragments_.begin(), fragments_.end(),
                               [&](const auto& f) { return f.first == name; });
  const std::string where = file_ + ": fragment \"" + name + "\": ";
  if (it == fragments_.end()) return failure(where + "no such fragment");
  std::string out, missing;
  std::vector<bool> used(values.size(), false);
  const std::string bad = scan(
      it->second,
      [&](const std::string& key) {
        const auto v = std::find_if(values.begin(), values.end(),
                                    [&](const auto& kv) { return kv.first == key; });
        if (v == values.end()) {
          if (missing.empty()) missing = key;
          return;
        }
        used[static_cast<std::size_t>(v - values.begin())] = true;
        out += v->second;
      },
      [&](std::string_view piece) { out += piece; });
  if (!bad.empty()) return failure(where + bad);
  if (!missing.empty()) return failure(where + "placeholder {{" + missing + "}} not filled");
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!used[i]) return failure(where + "no placeholder {{" + values[i].first + "}} to fill");
  }
  return out;
}

std::vector<std::string> ReportText::names() const {
  std::vector<std::string> out;
  for (const auto& f : fragments_) out.push_back(f.first);
  return out;
}

TextWriter& TextWriter::raw(std::string_view s) {
  if (status_.ok()) out_ += s;
  return *this;
}

TextWriter& TextWriter::fill(const std::string& name, const Fill& values) {
  out_ += text(name, values);
  return *this;
}

std::string TextWriter::text(const std::string& name, const Fill& values) {
  if (!status_.ok()) return "";
  auto t = text_.fill(name, values);
  if (!t) {
    status_ = t.error();
    return "";
  }
  return std::move(*t);
}

Result<std::string> TextWriter::finish() const {
  if (!status_.ok()) return status_.error();
  return out_;
}

}  // namespace studies
}  // namespace hexi
