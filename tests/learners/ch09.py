RIGHT = {
    "ch09.fold_lora": '''from course_lib.check import ch09, show_solution


def my_fold_lora(W, A, B, alpha, r):
    return W + (alpha / r) * (B @ A)


ch09.fold_lora(my_fold_lora)
# show_solution("ch09.fold_lora")
''',
    "ch09.export_for_serving": '''import mindspore as ms


def my_export(net, path, batch_size, seq_len):
    net.set_train(False)
    example = Tensor(np.zeros((batch_size, seq_len), np.int32))
    ms.export(net, example, file_name=str(path), file_format="MINDIR")


ch09.export_for_serving(my_export)
# show_solution("ch09.export_for_serving")
''',
    ("ch09.ex1", "ch09.ex2"): '''from course_lib.check import ch09
rows = 25 * 2
calls = -(-rows // 6)
ch09.ex1([calls, calls * 6 - rows])
ch09.ex2(2 * 4 * 16 * (128 + 128) * 4)
''',
}

WRONG = {
    "ch09.fold_lora": ('''from course_lib.check import ch09, show_solution


def my_fold_lora(W, A, B, alpha, r):
    return W + B @ A


ch09.fold_lora(my_fold_lora)
# show_solution("ch09.fold_lora")
''', {"ch09.fold_lora": "没有缩放"}),
    "ch09.export_for_serving": ('''import mindspore as ms


def my_export(net, path, batch_size, seq_len):
    example = Tensor(np.zeros((batch_size, seq_len), np.int32))
    ms.export(net, example, file_name=str(path), file_format="MINDIR")


ch09.export_for_serving(my_export)
# show_solution("ch09.export_for_serving")
''', {"ch09.export_for_serving": "dropout 被固化"}),
    ("ch09.ex1", "ch09.ex2"): ('''from course_lib.check import ch09
rows = 25
calls = -(-rows // 6)
ch09.ex1([calls, calls * 6 - rows])
ch09.ex2(2 * 4 * 16 * (128 + 128) * 4)
''', {"ch09.ex1": "把一条评论变成几行"}),
}
