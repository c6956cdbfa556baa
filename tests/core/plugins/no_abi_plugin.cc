// A plugin that forgot FLYWHEEL_PLUGIN_ABI().
#include "flywheel/core/plugin_registry.h"

extern "C" void flywheel_register_plugin(flywheel::PluginRegistry&) {}
