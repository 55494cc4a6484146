// Text made safe inside HTML or XML (SVG) text and attribute values.
#pragma once

#include <string>
#include <string_view>

namespace moelsp {

// & < > " ' as entities, exactly as Python's markupsafe.escape writes them
// (the chat templates' Jinja `escape` filter); also what the SVG reports use.
std::string markup_escape(std::string_view s);

}  // namespace moelsp
