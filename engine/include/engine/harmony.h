// gpt-oss's answer format ("harmony"): the assistant writes messages on
// channels, each a header then a body,
//
//   <|channel|>analysis<|message|>…thinking…<|end|>
//   <|start|>assistant<|channel|>final<|message|>…the answer…<|return|>
//
// (a header may also carry ` to=functions.name` and `<|constrain|>json` for
// a tool call). The user sees the final channel; the rest is reasoning.
// HarmonyStream takes the generated text as it streams and gives back the
// part of the answer that is complete; text that does not start with a
// channel header passes through unchanged, so any model's answer can go
// through it.
#pragma once

#include <string>
#include <string_view>

namespace moelsp {

class HarmonyStream {
 public:
  // Generated text in; the final channel's text that is now certain out.
  std::string push(std::string_view text);
  // At the end of generation: whatever was held back.
  std::string finish();

  bool is_harmony() const { return mode_ == Mode::Harmony; }
  const std::string& answer() const { return answer_; }        // everything push/finish returned
  const std::string& reasoning() const { return reasoning_; }  // the other channels' bodies, in order

 private:
  enum class Mode { Unknown, Plain, Harmony };
  enum class Part { Header, Body };
  std::string step(bool at_end);
  Mode mode_ = Mode::Unknown;
  Part part_ = Part::Header;
  bool final_channel_ = false;
  std::string buf_, header_, answer_, reasoning_;
};

}  // namespace moelsp
