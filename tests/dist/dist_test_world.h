#pragma once

#include "zero/world.h"

// The process's World, created once by the test main.
zero::World& test_world();
