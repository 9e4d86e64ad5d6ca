// Placeholder until this engine's tests land.
#include <gtest/gtest.h>
