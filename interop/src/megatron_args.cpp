// TODO(interop): the megatron reader and writer (a placeholder until they land).
#include "engines.hpp"
#include "tessel/core/error.hpp"

namespace tessel::interop::detail {

ImportedRun import_megatron(const std::string&, const ImportContext&) { throw Error("import: megatron is not read yet"); }
ExportedConfig export_megatron(const Plan&) { throw Error("export: megatron is not written yet"); }

}  // namespace tessel::interop::detail
