RIGHT = {
    ("ch00.ex1", "ch00.ex2", "ch00.ex3"): '''from course_lib.check import ch00
ch00.ex1(len(tok.encode("人工智能")))
ch00.ex2(len(tok.encode("🚀")))
ch00.ex3(tok.decode([290, 236, 838, 1476, 1916, 679]))
''',
}

WRONG = {
    ("ch00.ex1", "ch00.ex2", "ch00.ex3"): ('''from course_lib.check import ch00
ch00.ex1(len(tok.encode("人工智能")))
ch00.ex2(len(tok.encode("🚀")))
ch00.ex3("".join(tok.decode([i]) for i in [290, 236, 838, 1476, 1916, 679]))
''', {"ch00.ex3": "整个列表一次解码"}),
}
