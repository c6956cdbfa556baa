#!/usr/bin/env python3
"""Writes tokenizer_corpus.jsonl: the strings flywheel's tokenizers are compared on against
Hugging Face's `tokenizers` (tests/model/tokenizer_parity/). Deterministic; run it to regenerate."""
import json
import random

rng = random.Random(20261130)
corpus = []

def add(s):
    corpus.append(s)

# Contractions and casing.
for s in ["I'm here", "you're right", "we've been", "they'll go", "she'd say", "it's fine",
          "don't", "DON'T STOP", "We'RE", "I'M", "It'S", "rock'n'roll", "'s alone", "y'all'd've",
          "O'Neil's", "can't won't shan't", "'tis the season", "'''triple'''", "`backtick's`"]:
    add(s)

# English prose with punctuation.
prose = ["The quick brown fox jumps over the lazy dog.", "Hello, world!", "What?! No way...",
         "Mr. Smith (aged 42) paid $3.50 for 2 apples; Mrs. Jones paid 1.25.",
         "e.g. i.e. etc. vs. U.S.A.", "She said: \"Hi!\" -- then left.",
         "Semicolons; colons: dashes — en–dashes and ellipses…",
         "Question? Answer! Interrobang‽", "  leading spaces", "trailing spaces   ",
         "tabs\tin\tbetween", "mixed \t tabs \t and spaces"]
for s in prose:
    add(s)

# Code.
code = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "#include <iostream>\nint main() { std::cout << \"hi\\n\"; }",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "{\"key\": [1, 2, {\"nested\": null}], \"ok\": true}",
    "if [[ -f \"$file\" ]]; then echo \"${file%.txt}\"; fi",
    "const x = (a, b) => a ?? b?.c;",
    "x = [i**2 for i in range(10) if i % 2 == 0]",
    "    \n        indented\n    dedented\n",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "<div class=\"a\">Hello &amp; bye</div>",
    "a+=1;b-=2;c*=3;d/=4;e%=5;f<<=1;g>>=2;h&=3;i|=4;j^=5",
    "lambda: None  # comment\n\n\n# another",
    "print('single')\r\nprint(\"double\")\r\n",
]
for s in code:
    add(s)

# Whitespace runs.
for n in [1, 2, 3, 4, 7, 16]:
    add(" " * n)
    add("a" + " " * n + "b")
    add("\n" * n)
    add("x" + "\n" * n + "y")
    add("\t" * n + "t")
add(" \n \n ")
add("\r\n\r\n")
add("\r")
add("line1\nline2\r\nline3\rline4")
add("   \n\t  \n")
add("")

# Unicode whitespace and invisible characters.
specials = ["\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2007",
            "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff",
            "\u180e", "\u200b", "\u200c", "\u200d", "\u2060", "\u000b", "\u000c", "\u001c"]
for c in specials:
    add("word" + c + "word")
    add(c)
    add(" " + c + " x")
    add("1" + c + c + "2")

# Scripts.
scripts = ["你好，世界！", "机器学习是人工智能的一个分支。", "日本語のテキストです。カタカナとひらがな。",
           "한국어 문장입니다.", "Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم",
           "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Xin chào thế giới", "Tiếng Việt có dấu",
           "ᚠᚢᚦᚨᚱᚲ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "ﬁ ligature ﬂ", "Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ",
           "中文English混合text", "数字123和456", "emoji😀在中间", "混合  空格\t制表"]
for s in scripts:
    add(s)

# Composed vs decomposed (NFC matters for Qwen).
for s in ["e\u0301", "caf\u00e9", "cafe\u0301", "A\u030a", "\u00c5", "n\u0303o", "\u1e9b\u0323",
          "한", "\u1112\u1161\u11ab", "o\u0308\u0304", "\u0041\u0308\u0301", "Ω", "\u2126",
          "\u212b", "ﬀ", "x\u0323\u0307", "\u0958", "\u09cb"]:
    add(s)
    add("word " + s + " word")

# Emoji.
emoji = ["😀", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🇺🇸🇯🇵", "1️⃣", "👍🏻👍🏿", "❤️‍🔥", "🧑‍🤝‍🧑",
         "I ❤️ NY", "🤖🤖🤖", "✨ sparkle ✨", "👁️‍🗨️", "🫠"]
for s in emoji:
    add(s)
    add("text " + s + "text")

# Digits and numbers.
for s in ["0", "7", "42", "123", "1234", "12345", "1234567890", "3.14159", "-273.15",
          "1,000,000", "1e-9", "0x1F", "2026-11-30", "12:34:56", "v1.2.3", "１２３", "٣٤٥",
          "⅓ ½ ¾", "²³", "Ⅻ", "100%", "$1,234.56", "+1 (555) 012-3456", "9" * 40]:
    add(s)
    add("n=" + s + ".")

# Special tokens embedded in text.
for s in ["<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
          "<|endoftext|>", "text<|endoftext|>text", "<|begin_of_text|>Hi<|eot_id|>",
          "<|start_header_id|>user<|end_header_id|>\n\nhey<|eot_id|>",
          "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>{\"a\":1}</tool_call>",
          "<|im_start", "im_start|>", "< |im_end| >", "<|im_end|><|im_end|>",
          " <|im_start|> spaced <|im_end|> ", "<|fim_prefix|>code<|fim_suffix|>"]:
    add(s)

# Math, URLs, markdown.
for s in ["\\frac{a}{b} + \\sqrt{x^2}", "∑_{i=1}^{n} i = n(n+1)/2", "x² + y² = z²",
          "∀x ∈ ℝ, ∃y: y > x", "https://example.com/path?q=1&r=two#frag",
          "mailto:someone@example.org", "# Title\n\n- item 1\n- item 2\n\n**bold** _it_",
          "| a | b |\n|---|---|\n| 1 | 2 |", "> quote\n>> nested", "```python\nx=1\n```"]:
    add(s)

# Control characters and odd ASCII.
for s in ["\u0001\u0002\u0003", "bell\u0007", "del\u007f", "esc\u001b[31mred\u001b[0m",
          "back\\slash", "null\u0000byte", "~!@#$%^&*()_+`-={}|[]\\:\";'<>?,./"]:
    add(s)

# Repetition.
for c in ["a", "=", "!", " ", "ab", "\u00e9", "中", "😀", "-_", "0"]:
    for n in [5, 33, 100]:
        add(c * n)

# Random mixtures of the pieces above.
pieces = (prose + code + scripts + emoji + specials + ["'s", "'LL", "123", " ", "\n", "\t"] +
          ["<|im_start|>", "<|endoftext|>", "<|eot_id|>"])
while len(corpus) < 420:
    k = rng.randint(2, 6)
    corpus.append("".join(rng.choice(pieces) for _ in range(k)))

with open("tokenizer_corpus.jsonl", "w", encoding="utf-8") as f:
    for s in corpus:
        f.write(json.dumps({"text": s}, ensure_ascii=False) + "\n")
print(len(corpus), "strings")
