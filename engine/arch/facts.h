// What each architecture asks of a GGUF file, and whether the device pass
// runs it: one home per architecture. Each file under engine/arch/ defines
// its facts beside its Model; the table in arch.h lists them, `moelsp
// inspect` (model/model_info.cpp) checks a file against them before a load
// and the device pass (device/weights.cpp) reads whether it can run it.
// A light header: no layers, no model, so device/ and model_info need only this.
#pragma once

#include <string_view>
#include <vector>

namespace moelsp::arch {

struct ArchFacts {
  std::vector<std::string_view> keys;     // "{arch}." hyperparameters a file must have
  std::vector<std::string_view> tensors;  // in every layer ("blk.N." + name), besides the FFN's
  // Tensors spelled more than one way: for each entry, one of its sets must
  // all be there (MLA's q: attn_q, or attn_q_a and attn_q_b).
  std::vector<std::vector<std::vector<std::string_view>>> one_of;
  // Why the device forward pass cannot run this architecture; empty when it can.
  std::string_view device_unsupported;
};

// The routed experts' tensors in every MoE layer, whatever the architecture
// (the decoder's load_moe reads them).
inline constexpr std::string_view kMoeTensors[] = {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                                                   "ffn_down_exps.weight"};

const ArchFacts* facts_of(std::string_view arch);  // nullptr for an architecture moelsp does not run

extern const ArchFacts kDeepseek2Facts, kQwen3moeFacts, kLlamaFacts, kGlm4moeFacts, kGlmDsaFacts, kGptOssFacts;

}  // namespace moelsp::arch
