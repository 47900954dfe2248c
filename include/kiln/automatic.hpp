// kiln::automatic: "let Kiln choose the device". Queries take it in kiln::on(kiln::automatic)
// (the CPU for small host inputs, the first GPU for large ones); tensors take it in place of a
// device at creation (kiln::tensor::from(kiln::automatic, ...)), and each operation over them
// then runs where docs/placement.md's rule says.
#pragma once

namespace kiln {

struct automatic_t {};
inline constexpr automatic_t automatic{};

}  // namespace kiln
