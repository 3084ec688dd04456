// Unit checks of the chat-template interpreter's edges; whole templates are
// compared with python3-jinja2 in tests/chat_template/chat_template_test.py.
#include "text/chat_template.h"

#include <string>

#include "gtest/gtest.h"

namespace pagoda::text {
namespace {

TEST(ChatTemplateTest, RefusesConstructsOutsideTheSubsetAtLoad) {
  for (const char* source :
       {"{% macro m() %}x{% endmacro %}", "{{ x | wordwrap }}",
        "{% if x is divisibleby(3) %}{% endif %}", "{% if x %}unclosed", "{{ 'unterminated }}",
        "{% for x in y recursive %}{% endfor %}", "{% set x %}block{% endset %}", "{{ a ? b }}"}) {
    auto loaded = ChatTemplate::FromSource(source, "<s>", "</s>");
    ASSERT_FALSE(loaded.ok()) << source;
    EXPECT_NE(loaded.status().message().find("chat template line"), std::string::npos)
        << loaded.status();
  }
}

TEST(ChatTemplateTest, RendersMessagesAndSpecialTokens) {
  auto loaded = ChatTemplate::FromSource(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}",
      "<s>", "</s>");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto text = (*loaded)->Render({{"system", " be brief "}, {"user", "hi"}}, true);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<s><system>be brief<user>hi<assistant>");
}

TEST(ChatTemplateTest, RaiseExceptionIsInvalidArgumentWithItsMessage) {
  auto loaded = ChatTemplate::FromSource(
      "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}",
      "", "");
  ASSERT_TRUE(loaded.ok());
  auto text = (*loaded)->Render({{"assistant", "x"}}, false);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(text.status().message().find("first must be user"), std::string::npos);
  // Attributes of undefined values fail as in Jinja.
  auto undefined = ChatTemplate::FromSource("{{ nothing.attribute }}", "", "");
  ASSERT_TRUE(undefined.ok());
  EXPECT_FALSE((*undefined)->Render({{"user", "x"}}, false).ok());
}

// Found by tests/fuzz/chat_template_fuzzer.cc: a namespace that holds itself
// leaked its memory at every render. The ASan run of this test
// (scripts/sanitizer_tests.sh) fails on the leak; here it must render.
TEST(ChatTemplateTest, NamespaceHoldingItselfRendersAndIsFreed) {
  auto loaded = ChatTemplate::FromSource(
      "{% set other = namespace() %}{% set ns = namespace(n=1) %}{% set ns.me = ns %}"
      "{% set ns.list = [ns, 2] %}{% set other.back = ns %}{% set ns.other = other %}"
      "{{ ns.me.me.n }} {{ ns.list[0].n }} {{ ns.other.back.n }}",
      "", "");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (int i = 0; i < 3; ++i) {
    auto text = (*loaded)->Render({{"user", "x"}}, false);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, "1 1 1");
  }
}

}  // namespace
}  // namespace pagoda::text
