#include "kernels/window.h"

#include "kernels/kernel_util.h"

namespace actorflow {

StatusOr<std::pair<int64_t, int64_t>> ReadPair(const Attrs& attrs, const std::string& name, int64_t fallback) {
  if (!attrs.Has(name)) return std::make_pair(fallback, fallback);
  AF_ASSIGN_OR_RETURN(std::vector<int64_t> v, attrs.GetInts(name));
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2 || v[0] <= 0 || v[1] <= 0)
    return InvalidArgument("attribute '" + name + "' must be a positive int or a list of 2 positive ints [h, w], got " +
                           ShapeToString(v));
  return std::make_pair(v[0], v[1]);
}

Status CheckNchw(const Attrs& attrs) {
  std::string format = attrs.GetStringOr("data_format", "NCHW");
  if (format == "NCHW" || format == "channels_first") return Status::Ok();
  return BadChoice("data_format", format, "NCHW (channels_first); NHWC is not supported on CPU yet");
}

StatusOr<Window2d> ReadWindow(const Shape& x, int64_t kh, int64_t kw, const Attrs& attrs, const std::string& what,
                              bool allow_dilation) {
  if (x.size() != 4) return InvalidArgument(what + ": x must have rank 4 (N, C, H, W), got shape " + ShapeToString(x));
  AF_RETURN_IF_ERROR(CheckNchw(attrs));
  Window2d g;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3], g.kh = kh, g.kw = kw;
  AF_ASSIGN_OR_RETURN(auto strides, ReadPair(attrs, "strides", 1));
  g.sh = strides.first, g.sw = strides.second;
  if (allow_dilation) {
    AF_ASSIGN_OR_RETURN(auto dilation, ReadPair(attrs, "dilation_rate", 1));
    g.dh = dilation.first, g.dw = dilation.second;
  }
  int64_t ekh = (kh - 1) * g.dh + 1, ekw = (kw - 1) * g.dw + 1;  // effective (dilated) window
  auto padding = attrs.values().find("padding");
  std::string mode = "VALID";
  if (padding != attrs.values().end() && std::holds_alternative<std::string>(padding->second)) {
    mode = std::get<std::string>(padding->second);
    for (char& ch : mode) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (mode == "SAME" || mode == "SAME_UPPER") {
      g.oh = (g.h + g.sh - 1) / g.sh;
      g.ow = (g.w + g.sw - 1) / g.sw;
      int64_t ph = std::max<int64_t>((g.oh - 1) * g.sh + ekh - g.h, 0), pw = std::max<int64_t>((g.ow - 1) * g.sw + ekw - g.w, 0);
      g.top = ph / 2, g.bottom = ph - ph / 2, g.left = pw / 2, g.right = pw - pw / 2;
      return g;
    }
    if (mode != "VALID") return BadChoice("padding", std::get<std::string>(padding->second), "\"SAME\", \"VALID\", or a list of ints");
  } else if (padding != attrs.values().end()) {
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> p, attrs.GetInts("padding"));
    if (p.size() == 1) p = {p[0], p[0], p[0], p[0]};
    else if (p.size() == 2) p = {p[0], p[0], p[1], p[1]};
    else if (p.size() == 8) {
      if (p[0] || p[1] || p[2] || p[3]) return InvalidArgument(what + ": padding on N or C is not supported, got " + ShapeToString(p));
      p = {p[4], p[5], p[6], p[7]};
    } else if (p.size() != 4) {
      return InvalidArgument(what + ": padding list must have 1, 2 ([h, w]), 4 ([top, bottom, left, right]) or 8 entries, got " +
                             ShapeToString(p));
    }
    for (int64_t v : p)
      if (v < 0) return InvalidArgument(what + ": padding must not be negative, got " + ShapeToString(p));
    g.top = p[0], g.bottom = p[1], g.left = p[2], g.right = p[3];
  }
  int64_t hp = g.h + g.top + g.bottom, wp = g.w + g.left + g.right;
  if (hp < ekh || wp < ekw)
    return InvalidArgument(what + ": the " + std::to_string(ekh) + "x" + std::to_string(ekw) + " window (dilated) does not fit the " +
                           std::to_string(hp) + "x" + std::to_string(wp) + " padded input " + ShapeToString(x));
  g.oh = (hp - ekh) / g.sh + 1;
  g.ow = (wp - ekw) / g.sw + 1;
  return g;
}

}  // namespace actorflow
