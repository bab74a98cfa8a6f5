"""nsverify/papers/park"""
