// A plugin built against a different plugin ABI.
#include "flywheel/core/plugin_registry.h"

extern "C" int flywheel_plugin_abi_version() { return FLYWHEEL_PLUGIN_ABI_VERSION + 1000; }

extern "C" void flywheel_register_plugin(flywheel::PluginRegistry&) {}
