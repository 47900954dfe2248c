#include "runtime/cache_key.hpp"

// Header-only use: nothing links libxxhash at run time.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kiln::detail {
namespace {

// Fixed little-endian encoding so the key does not depend on the host's byte order.
void update_u64(XXH3_state_t* state, std::uint64_t v) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(v >> (8 * i));
  XXH3_128bits_update(state, bytes, sizeof bytes);
}

void update_field(XXH3_state_t* state, std::string_view field) {
  update_u64(state, field.size());
  XXH3_128bits_update(state, field.data(), field.size());
}

}  // namespace

std::string cache_key::hex() const {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = digits[(hi >> (4 * i)) & 0xf];
    out[31 - i] = digits[(lo >> (4 * i)) & 0xf];
  }
  return out;
}

cache_key make_cache_key(std::string_view backend, std::string_view arch,
                         std::string_view compiler_id, std::string_view options,
                         std::string_view source) {
  // A stack state avoids XXH3_createState's allocation; XXH3_state_t is complete with
  // XXH_INLINE_ALL.
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  update_u64(&state, cache_format_version);
  update_field(&state, backend);
  update_field(&state, arch);
  update_field(&state, compiler_id);
  update_field(&state, options);
  update_field(&state, source);
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  return cache_key{h.high64, h.low64};
}

std::uint64_t checksum64(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace kiln::detail
