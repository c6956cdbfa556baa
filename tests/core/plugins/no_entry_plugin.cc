// A library that declares the ABI version but has no flywheel_register_plugin.
#include "flywheel/core/plugin_registry.h"

FLYWHEEL_PLUGIN_ABI()

extern "C" int not_a_flywheel_entry_point() { return 0; }
