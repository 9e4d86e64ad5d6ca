// TODO(interop): the deepspeed reader and writer (a placeholder until they land).
#include "engines.hpp"
#include "tessel/core/error.hpp"

namespace tessel::interop::detail {

ImportedRun import_deepspeed(const std::string&, const ImportContext&) { throw Error("import: deepspeed is not read yet"); }
ExportedConfig export_deepspeed(const Plan&) { throw Error("export: deepspeed is not written yet"); }

}  // namespace tessel::interop::detail
