// Translation unit that hosts the shared LibTorch precompiled header (cmake/FlywheelHelpers.cmake).
