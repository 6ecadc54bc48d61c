// The model the install test saves (make_model.cc, with the whole project) and runs from the
// installed package (main.cc): y = relu(x . W + b), written out here so that the consumer
// computes the expected output itself.
#pragma once

namespace consumer_model {
constexpr int kRows = 2, kIn = 3, kOut = 4;
constexpr float kX[kRows * kIn] = {1, 2, 3, -1, 0.5f, 1};
constexpr float kWeight[kIn * kOut] = {1, -1, 2, 0, 0.5f, 3, -2, 1, -1, 0, 1, 4};
constexpr float kBias[kOut] = {0.25f, -0.5f, 1, 0};
}  // namespace consumer_model
