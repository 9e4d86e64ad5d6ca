// TODO(interop): the torchtitan reader and writer (a placeholder until they land).
#include "engines.hpp"
#include "tessel/core/error.hpp"

namespace tessel::interop::detail {

ImportedRun import_torchtitan(const std::string&, const ImportContext&) { throw Error("import: torchtitan is not read yet"); }
ExportedConfig export_torchtitan(const Plan&) { throw Error("export: torchtitan is not written yet"); }

}  // namespace tessel::interop::detail
