// Command-line flags from the settings table (assist/settings.h): each
// subcommand gets the flags of the settings it reads, with the table's help,
// range and choices, and only the flags given are applied (so they override
// the config file and leave the rest to the layers below).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "assist/settings.h"

namespace moelsp::cli {

class SettingFlags {
 public:
  // The flags of every setting whose spec lists one of `commands`.
  SettingFlags(CLI::App* app, unsigned commands) {
    for (const auto& spec : assist::setting_specs()) {
      if (spec.flag.empty() || !(spec.commands & commands)) continue;
      auto e = std::make_unique<Entry>();
      e->spec = &spec;
      std::string help = fmt::format("{} (setting: {}; default: {})", spec.help, spec.key, spec.default_text);
      if (spec.kind == assist::SettingKind::Int) help += " " + assist::setting_range_text(spec);
      e->opt = app->add_option(std::string(spec.flag), e->value, help);
      e->opt->type_name(spec.kind == assist::SettingKind::Bool  ? "on|off"
                        : spec.kind == assist::SettingKind::Int ? "INT"
                        : spec.choices.empty()                  ? "TEXT"
                                                                : choices(spec));
      // The table's checks, at parse time: CLI11 prints the message and exits 106.
      const assist::SettingSpec* sp = &spec;
      e->opt->check(CLI::Validator(
          [sp](std::string& text) -> std::string {
            try {
              assist::Settings scratch;
              assist::set_setting(scratch, *sp, assist::parse_setting_text(*sp, text));
              return "";
            } catch (const std::exception& ex) {
              return ex.what();
            }
          },
          ""));
      entries_.push_back(std::move(e));
    }
  }

  // Stores the flags that were given.
  void apply(assist::Settings& s) const {
    for (const auto& e : entries_)
      if (e->opt->count() > 0) assist::set_setting(s, *e->spec, assist::parse_setting_text(*e->spec, e->value));
  }

 private:
  static std::string choices(const assist::SettingSpec& s) {
    std::string out;
    for (size_t i = 0; i < s.choices.size(); ++i) out += (i ? "|" : "") + std::string(s.choices[i]);
    return out;
  }
  struct Entry {
    const assist::SettingSpec* spec = nullptr;
    std::string value;
    CLI::Option* opt = nullptr;
  };
  std::vector<std::unique_ptr<Entry>> entries_;
};

}  // namespace moelsp::cli
