// The unit that zero_torch_pch compiles to precompile <torch/torch.h> (cmake/compile_speed.cmake).
