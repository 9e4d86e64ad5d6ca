// TODO(interop): the nemo reader and writer (a placeholder until they land).
#include "engines.hpp"
#include "tessel/core/error.hpp"

namespace tessel::interop::detail {

ImportedRun import_nemo(const std::string&, const ImportContext&) { throw Error("import: nemo is not read yet"); }
ExportedConfig export_nemo(const Plan&) { throw Error("export: nemo is not written yet"); }

}  // namespace tessel::interop::detail
