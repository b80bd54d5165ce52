"""Use-case presets: named (input_len, output_len) workloads, usable as a ``usecase`` axis.

From GenZ's use-case comparison (abhibambhaniya/GenZ-LLM-Analyzer,
``Website/pages/3_Usecase_Comparision.py``: Ques-Ans, Text Summarization, Chatbots,
Code Gen.). GenZ also gives each a beam count (2-4); dse models one sequence per
request, so beams are left out.
"""

USECASES: dict[str, tuple[int, int]] = {
    "qa": (1000, 200),
    "summarization": (15000, 1000),
    "chat": (2048, 128),
    "code-gen": (20000, 50),
}
