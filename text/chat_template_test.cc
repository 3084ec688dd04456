// Unit checks of the chat-template interpreter's edges; whole templates are
// compared with python3-jinja2 in tests/chat_template/chat_template_test.py.
#include "text/chat_template.h"

#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::text {
namespace {

TEST(ChatTemplateTest, RefusesConstructsOutsideTheSubsetAtLoad) {
  for (const char* source :
       {"{% macro m() %}x{% endmacro %}", "{{ x | wordwrap }}",
        "{% if x is divisibleby(3) %}{% endif %}", "{% if x %}unclosed", "{{ 'unterminated }}",
        "{% for x in y recursive %}{% endfor %}", "{% set x %}block{% endset %}", "{{ a ? b }}",
        "{{ x | reject('divisibleby', 3) }}", "{{ x | select(test_name) }}", "{{ x | select }}"}) {
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

// Llama 3.1 lists its builtin tools with reject('equalto', ...).
TEST(ChatTemplateTest, SelectAndRejectApplyTheNamedTest) {
  auto loaded = ChatTemplate::FromSource(
      "{{ tools | reject('equalto', 'code_interpreter') | join(', ') }};"
      "{{ tools | select('eq', 'brave_search') | list | length }};"
      "{{ [1, none, 2] | reject('none') | list }}",
      "", "");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto text = (*loaded)->Render(
      {}, false, nlohmann::ordered_json{"brave_search", "code_interpreter", "wolfram_alpha"});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "brave_search, wolfram_alpha;1;[1, 2]");
}

// Variables beside the messages, as transformers' apply_chat_template
// keyword arguments: new ones, bos_token replaced; the request's own refused.
TEST(ChatTemplateTest, VariablesAddToTheContext) {
  auto loaded = ChatTemplate::FromSource(
      "{{ bos_token }}{{ date_string | default('26 Jul 2024') }}{{ messages | length }}", "<s>",
      "</s>");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto plain = (*loaded)->Render({{"user", "hi"}}, false);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain, "<s>26 Jul 20241");
  auto dated = (*loaded)->Render({{"user", "hi"}}, false, nullptr,
                                 {{"date_string", "01 Sep 2026"}, {"bos_token", ""}});
  ASSERT_TRUE(dated.ok()) << dated.status();
  EXPECT_EQ(*dated, "01 Sep 20261");
  for (const char* reserved : {"messages", "tools", "add_generation_prompt"}) {
    auto refused = (*loaded)->Render({{"user", "hi"}}, false, nullptr, {{reserved, 1}});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << reserved;
  }
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

// Found by tests/fuzz/chat_template_fuzzer.cc (UBSan: a signed overflow in
// `*`): integers are int64, and a result outside them, with values a request
// can send as chat_template_kwargs, is an error instead of undefined
// behaviour; a slice step or range past them too; and tojson's indent is
// bounded (each level repeats it before the output limit can look).
TEST(ChatTemplateTest, IntegersStayInsideInt64) {
  const nlohmann::ordered_json variables = {{"big", std::numeric_limits<int64_t>::max()},
                                            {"small", std::numeric_limits<int64_t>::min()}};
  const std::pair<const char*, const char*> cases[] = {
      {"{{ big * 2 }}", nullptr},
      {"{{ big + 1 }}", nullptr},
      {"{{ small - 1 }}", nullptr},
      {"{{ -small }}", nullptr},
      {"{{ small // -1 }}", nullptr},
      {"{{ small % -1 }}", nullptr},
      {"{{ range(small, big) | length }}", nullptr},
      {"{{ [1, 2] | tojson(indent=big) }}", nullptr},
      {"{{ big - 1 }}", "9223372036854775806"},
      {"{{ 'abc'[1::big] }}", "b"},
      {"{{ small // 3 }} {{ small % 3 }} {{ big // -10 }} {{ big % -10 }} {{ -7 % 2 }}",
       "-3074457345618258603 1 -922337203685477581 -3 1"},
      {"{{ 'abc'[big::small] }}", "c"},
      {"{{ [1] | tojson(indent=-2) }}", "[\n1\n]"},
  };
  for (const auto& [source, expected] : cases) {
    auto loaded = ChatTemplate::FromSource(source, "", "");
    ASSERT_TRUE(loaded.ok()) << source << ": " << loaded.status();
    auto text = (*loaded)->Render({{"user", "x"}}, false, nullptr, variables);
    if (expected == nullptr) {
      EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << source;
    } else {
      ASSERT_TRUE(text.ok()) << source << ": " << text.status();
      EXPECT_EQ(*text, expected) << source;
    }
  }
}

// Found by tests/fuzz/chat_template_fuzzer.cc (a 6 s render): loops nest as
// deep as the template over the request's messages, and each `+` on a list
// copies it, so a render has a work budget, charged for every value an
// expression yields; strings and lists are bounded too. An ordinary template over many messages stays
// far inside it.
TEST(ChatTemplateTest, RenderWorkIsBounded) {
  const std::vector<ChatMessage> many(300, ChatMessage{"user", "hello"});
  const std::pair<const char*, const char*> refused[] = {
      {"{% set ns = namespace(all=[]) %}{% for a in messages %}{% for b in messages %}"
       "{% for c in messages %}{% set ns.all = ns.all + [c.role] %}{% endfor %}{% endfor %}"
       "{% endfor %}{{ ns.all | length }}",
       "too much work"},
      // Every copy of a string is charged: the doubling runs out of budget
      // before it reaches the 16 MiB bound.
      {"{% set ns = namespace(s='ab') %}{% for m in messages %}{% set ns.s = ns.s ~ ns.s %}"
       "{% endfor %}{{ ns.s | length }}",
       "too much work"},
      // Values built by calls and filters are charged too, not only operators'.
      {"{% for m in messages %}{% set r = range(1000000) %}{% endfor %}", "too much work"},
      {"{{ 'ab' * 100000000 }}", "string too long"},
  };
  for (const auto& [source, why] : refused) {
    SCOPED_TRACE(source);
    auto loaded = ChatTemplate::FromSource(source, "", "");
    ASSERT_TRUE(loaded.ok()) << source << ": " << loaded.status();
    auto text = (*loaded)->Render(many, false);
    ASSERT_FALSE(text.ok()) << source;
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(text.status().message().find(why), std::string::npos) << text.status();
  }
  auto ordinary = ChatTemplate::FromSource(
      "{% set ns = namespace(roles=[]) %}{% for m in messages %}<{{ m.role }}>{{ m.content }}"
      "{% set ns.roles = ns.roles + [m.role] %}{% endfor %}{{ ns.roles | length }}",
      "", "");
  ASSERT_TRUE(ordinary.ok()) << ordinary.status();
  auto text = (*ordinary)->Render(many, false);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->size(), 300 * std::string("<user>hello").size() + 3);

  // A template given a smaller budget (the fuzzer's) refuses what the
  // default renders.
  auto tight = ChatTemplate::FromSource("{% for m in messages %}<{{ m.role }}>{% endfor %}", "", "",
                                        /*max_render_work=*/500);
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_TRUE((*tight)->Render(std::vector<ChatMessage>(10, many[0]), false).ok());
  EXPECT_EQ((*tight)->Render(many, false).status().code(), absl::StatusCode::kInvalidArgument);
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

// Found by tests/fuzz/chat_template_fuzzer.cc: printing a namespace that
// holds itself recursed until the stack overflowed. Values a template
// nests without bound (a list wrapped once per iteration, a list that
// holds another twice per iteration) are printed, compared, serialized and
// freed without recursing past kMaxNesting, and without exponential work.
TEST(ChatTemplateTest, ValuesNestedWithoutBoundNeitherOverflowTheStackNorRunForever) {
  const std::string wrapped =  // 30,000 levels deep.
      "{% set ns = namespace(x=1, y=1) %}{% for a in range(30000) %}"
      "{% set ns.x = [ns.x] %}{% set ns.y = [ns.y] %}{% endfor %}";
  const std::string doubled =  // 2^40 paths through 40 shared lists.
      "{% set ns = namespace(x=1, y=1) %}{% for a in range(40) %}"
      "{% set ns.x = [ns.x, ns.x] %}{% set ns.y = [ns.y, ns.y] %}{% endfor %}";
  // The shared lists' cases render with a budget of 2^16 units (their
  // bounds scale with it; at the default they take seconds under ASan).
  constexpr int64_t kSmall = int64_t{1} << 16;
  constexpr int64_t kDefault = jinja::kDefaultMaxRenderWork;
  const std::tuple<std::string, std::string, int64_t> cases[] = {
      {"{% set ns = namespace(n=1) %}{% set ns.me = ns %}{{ ns }}", "OK", kDefault},
      {"{% set ns = namespace(n=1) %}{% set ns.me = ns %}{{ ns | tojson }}", "hold themselves",
       kDefault},
      {wrapped + "{{ ns.x | length }}{% set ns.x = 0 %}", "OK", kDefault},
      {wrapped + "{{ ns.x }}", "OK", kDefault},
      {wrapped + "{{ ns.x == ns.x }}", "OK", kDefault},
      {wrapped + "{{ ns.x == ns.y }}", "nested deeper than 128", kDefault},
      {wrapped + "{{ ns.x | tojson }}", "nested deeper than 128", kDefault},
      {doubled + "{{ ns.x }}", "too much work", kSmall},
      {doubled + "{{ ns.x | tojson }}", "string too long", kSmall},
      {doubled + "{{ ns.x == ns.y }}", "too much work", kSmall},
      {doubled + "{{ ns.x in [ns.y] }}", "too much work", kSmall},
      {doubled + "{{ [ns.y] | select('equalto', ns.x) | list | length }}", "too much work", kSmall},
      {doubled + "{{ {'a': 1}[ns.x] }}", "not a dict key", kSmall},
      {"{% set d = {'a': 1} %}{% set d.me = d %}", "is not a namespace", kDefault},
  };
  for (const auto& [source, expected, budget] : cases) {
    SCOPED_TRACE(source);
    auto loaded = ChatTemplate::FromSource(source, "", "", budget);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    absl::StatusOr<std::string> text = (*loaded)->Render({{"user", "x"}}, false);
    if (expected == "OK") {
      EXPECT_TRUE(text.ok()) << text.status();
      continue;
    }
    ASSERT_FALSE(text.ok());
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(text.status().message().find(expected), std::string::npos) << text.status();
  }
  auto self =
      ChatTemplate::FromSource("{% set ns = namespace(n=1) %}{% set ns.me = ns %}{{ ns }}", "", "");
  ASSERT_TRUE(self.ok());
  EXPECT_EQ(*(*self)->Render({{"user", "x"}}, false), "{'n': 1, 'me': ...}");
}

// Found by tests/fuzz/chat_template_fuzzer.cc: a few thousand `[` in one
// expression overflowed the parser's stack. Expressions and blocks nested
// past their bounds are refused when the template loads.
TEST(ChatTemplateTest, NestingIsBoundedWhenTheTemplateLoads) {
  auto repeat = [](const std::string& text, int times) {
    std::string out;
    for (int i = 0; i < times; ++i) out += text;
    return out;
  };
  const std::pair<std::string, std::string> refused[] = {
      {"{{ " + repeat("[", 3000) + "1" + repeat("]", 3000) + " }}", "expression nested deeper"},
      {"{{ " + repeat("(", 3000) + "1" + repeat(")", 3000) + " }}", "expression nested deeper"},
      {"{{ " + repeat("-", 3000) + "1 }}", "expression nested deeper"},
      {"{{ " + repeat("not ", 3000) + "1 }}", "expression nested deeper"},
      {"{{ " + repeat("1 if 1 else ", 3000) + "1 }}", "expression nested deeper"},
      {repeat("{% if 1 %}", 1000) + repeat("{% endif %}", 1000), "blocks nested deeper than 64"},
  };
  for (const auto& [source, why] : refused) {
    auto loaded = ChatTemplate::FromSource(source, "", "");
    ASSERT_FALSE(loaded.ok()) << source.substr(0, 40);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(loaded.status().message().find(why), std::string::npos) << loaded.status();
  }
  auto nested =
      ChatTemplate::FromSource("{{ " + repeat("[", 20) + "1" + repeat("]", 20) + " }}" +
                                   repeat("{% if 1 %}", 30) + "x" + repeat("{% endif %}", 30),
                               "", "");
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(*(*nested)->Render({{"user", "x"}}, false),
            repeat("[", 20) + "1" + repeat("]", 20) + "x");
}

// vLLM's "auto" content format: a loop over a message's content, the
// message taken from a loop over messages (a slice, a filter, a variable
// set from them), means OpenAI's list of parts; anything else a string.
TEST(ChatTemplateTest, DetectsTheContentFormatAsVllm) {
  auto format = [](const std::string& source) {
    auto loaded = ChatTemplate::FromSource(source, "<s>", "</s>");
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? (*loaded)->detected_content_format() : ChatContentFormat::kString;
  };
  EXPECT_EQ(format("{% for m in messages %}{{ m['content'] | trim }}{% endfor %}"),
            ChatContentFormat::kString);
  EXPECT_EQ(format("{% for m in messages %}{% for c in m['content'] %}{{ c['text'] }}{% endfor %}"
                   "{% endfor %}"),
            ChatContentFormat::kOpenAi);
  EXPECT_EQ(format("{% for m in messages[1:] %}{% for c in m.content | select('mapping') %}"
                   "{{ c.text }}{% endfor %}{% endfor %}"),
            ChatContentFormat::kOpenAi);
  EXPECT_EQ(format("{% set rest = messages[1:] %}{% set loop_messages = rest %}"
                   "{% for m in loop_messages %}{% if m.content is string %}{{ m.content }}"
                   "{% else %}{% for c in m.content %}{{ c.text }}{% endfor %}{% endif %}"
                   "{% endfor %}"),
            ChatContentFormat::kOpenAi);
  // A content loop over a variable no messages loop binds, or a loop over
  // messages binding two names (vLLM's detection gives up there): a string.
  EXPECT_EQ(format("{% set m = {'content': []} %}{% for c in m.content %}{% endfor %}"),
            ChatContentFormat::kString);
  EXPECT_EQ(format("{% for i, m in messages %}{% for c in m.content %}{% endfor %}{% endfor %}"),
            ChatContentFormat::kString);
}

TEST(ChatTemplateTest, OpenAiContentFormatHandsTheTemplateTheParts) {
  auto loaded = ChatTemplate::FromSource(
      "{% for m in messages %}{% for c in m.content %}[{{ c.type }}:{{ c.text }}]{% endfor %}|"
      "{% endfor %}",
      "<s>", "</s>");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ChatMessage parts{"user", "a\nb"};
  parts.parts = {"a", "b"};
  ChatMessage plain{"assistant", "x"};  // Built without parts: the content is the one part.
  ChatMessage empty{"user", ""};
  absl::StatusOr<std::string> rendered =
      (*loaded)->Render({parts, plain, empty}, false, nullptr, nullptr, ChatContentFormat::kOpenAi);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(*rendered, "[text:a][text:b]|[text:x]||");
}

// transformers' continue_final_message: the prompt ends inside the last
// message (cut at a mark after its text; right-stripped when the template
// trimmed the mark's space); refused when the template drops the text or
// never reads "content", or the last message has no text part.
TEST(ChatTemplateTest, ContinueFinalMessageEndsThePromptInsideTheLastMessage) {
  auto render = [](const std::string& source, std::vector<ChatMessage> messages,
                   ChatContentFormat format = ChatContentFormat::kString) {
    auto loaded = ChatTemplate::FromSource(source, "<s>", "</s>");
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return (*loaded)->Render(messages, false, nullptr, nullptr, format, true);
  };
  const std::string tags =
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}";
  const std::vector<ChatMessage> chat = {{"user", "hi"}, {"assistant", "Sure, "}};
  EXPECT_EQ(*render(tags, chat), "<user>hi</user><assistant>Sure, ");
  EXPECT_EQ(*render("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>"
                    "{% endfor %}",
                    chat),
            "<user>hi</user><assistant>Sure,");
  ChatMessage parts{"assistant", "a\nb"};
  parts.parts = {"a", "b"};
  EXPECT_EQ(*render("{% for m in messages %}{% for c in m.content %}[{{ c.text }}]{% endfor %}|"
                    "{% endfor %}",
                    {{"user", "hi"}, parts}, ChatContentFormat::kOpenAi),
            "[hi]|[a][b");
  auto refused = [](const absl::StatusOr<std::string>& rendered, const std::string& message) {
    ASSERT_FALSE(rendered.ok()) << *rendered;
    EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(rendered.status().message().substr(0, message.size()), message);
  };
  refused(render("{% for m in messages[:-1] %}{{ m.content }}{% endfor %}", chat),
          "continue_final_message is set but the final message does not appear in the chat");
  refused(render("{% for m in messages %}{{ m['cont' ~ 'ent'] }}{% endfor %}", chat),
          "continue_final_message is set to \"content\" but this is not an accepted field");
  refused(render(tags, {{"user", ""}}, ChatContentFormat::kOpenAi),
          "continue_final_message is set but we could not find any text to continue");
}

}  // namespace
}  // namespace pagoda::text
