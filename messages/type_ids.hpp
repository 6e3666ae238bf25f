#pragma once
/// @file type_ids.hpp
/// The project's one CAF type-ID block and the CAF inspectors for the wire messages.
/// A message serializes as its encoded bytes; deserializing re-runs the full verification
/// (message::decode) in a load callback, so a corrupted buffer from a remote node becomes a
/// deserialization error, never an unchecked read. Register the block with
/// `cfg.add_message_types<caf::id_block::infrarsi>()` (or `CAF_MAIN(caf::id_block::infrarsi)`).

#include <cstdint>
#include <vector>

#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/type_id.hpp>

#include "messages/codec.hpp"

namespace infrarsi::messages {

/// CAF inspector: a message travels as its verified bytes; loading verifies again.
template <class Inspector, class Table>
typename Inspector::result_type inspect(Inspector& f, message<Table>& x) {
  std::vector<std::uint8_t> bytes;
  if constexpr (Inspector::reads_state)
    bytes = x.bytes().to_vector();
  auto verify_on_load = caf::meta::load_callback([&]() -> caf::error {
    auto decoded = message<Table>::decode(bytes.data(), bytes.size());
    if (!decoded)
      return std::move(decoded.error());
    x = std::move(*decoded);
    return caf::none;
  });
  return f(caf::meta::type_name(table_traits<Table>::name), bytes, verify_on_load);
}

} // namespace infrarsi::messages

CAF_BEGIN_TYPE_ID_BLOCK(infrarsi, caf::first_custom_type_id)
  CAF_ADD_TYPE_ID(infrarsi, (infrarsi::messages::envelope_msg))
  CAF_ADD_TYPE_ID(infrarsi, (infrarsi::messages::trial_spec_msg))
  CAF_ADD_TYPE_ID(infrarsi, (infrarsi::messages::trial_result_msg))
  CAF_ADD_TYPE_ID(infrarsi, (infrarsi::messages::event_record_msg))
CAF_END_TYPE_ID_BLOCK(infrarsi)
