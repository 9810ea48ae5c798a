// zerocpp — DeepSpeed's ZeRO in C++. The umbrella header.
#pragma once

#include "zero/comm_stats.h"
#include "zero/communicator.h"
#include "zero/config.h"
#include "zero/error.h"
#include "zero/world.h"
