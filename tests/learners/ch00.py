RIGHT = {
    ("ch00.ex1", "ch00.ex2", "ch00.ex3"): '''from course_lib.check import ch00
from course_lib import data
ch00.ex1(len(tok.encode("深度学习")))
ch00.ex2(len(tok.encode("🚀")))
de = tok.encode("的")[0]
ch00.ex3(sum(ids.count(de) for ids in tok.encode_batch(data.news_splits().validation)))
''',
}

WRONG = {
    ("ch00.ex1", "ch00.ex2", "ch00.ex3"): ('''from course_lib.check import ch00
from course_lib import data
ch00.ex1(len(tok.encode("深度学习")))
ch00.ex2(len(tok.encode("🚀")))
ch00.ex3(sum(doc.count("的") for doc in data.news_splits().validation))
''', {"ch00.ex3": "出现的次数"}),
}
